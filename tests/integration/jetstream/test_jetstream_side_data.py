"""Deleting a JetStream run deletes its checkpoints, fold mark and attachments from the buckets.

A real daemon on this session's shared nats-server (tests/storage/backend_jetstream.py); the
buckets are inspected from the test through their own subjects, as ``nats object ls`` would.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import journald_client as jc
import nats

from journald.storage.jetstream.buckets import ROLES, bucket_name
from journald.storage.jetstream.objects import ObjectBucket
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.storage.backend_jetstream import fresh_stream


async def objects_of(url: str, stream: str, run_id: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        names: list[str] = []
        for role in ROLES:
            names += await ObjectBucket(nc, bucket_name(stream, role)).names(run_id + "/")
        return names
    finally:
        await nc.close()


def test_deleting_a_run_removes_its_objects_and_a_new_run_of_that_id_starts_bare(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    sock = Path(f"/tmp/jd-side-{os.getpid()}-{stream}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", stream, socket=sock) as d,
        jc.connect(str(d.socket)) as client,
    ):
        with client.start("doomed", FP, "hello") as run:
            run.assistant("hi", stop_reason="end_turn")
        client.put_attachment("doomed", b"\x89PNG bytes", "image/png")
        client.checkpoint("doomed", label="one")
        list(client.iter_history("doomed"))
        with client.start("kept", FP, "hello") as run:
            run.assistant("hi", stop_reason="end_turn")
        kept = client.checkpoint("kept")
        assert len(asyncio.run(objects_of(url, stream, "doomed"))) >= 2

        assert client.delete("doomed")
        assert asyncio.run(objects_of(url, stream, "doomed")) == []
        with client.start("doomed", FP, "a new life") as run:
            run.assistant("fresh", stop_reason="end_turn")
        assert client.checkpoints("doomed") == []
        assert client.checkpoints("kept") == [kept]


async def purge_records(url: str, stream: str, run_id: str) -> None:
    """Remove a run's records from the stream behind the daemon (what a Delete that died
    between its two steps leaves: the objects without the records)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        subjects = info.config.subjects or []
        prefix = subjects[0].removesuffix(".>")
        await js.purge_stream(stream, subject=f"{prefix}.{run_id}.*")
    finally:
        await nc.close()


def test_a_delete_of_a_run_whose_records_are_gone_still_removes_its_objects(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    sock = Path(f"/tmp/jd-side-{os.getpid()}-{stream}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", stream, socket=sock) as d,
        jc.connect(str(d.socket)) as client,
    ):
        with client.start("half", FP, "hello") as run:
            run.assistant("hi", stop_reason="end_turn")
        client.put_attachment("half", b"\x89PNG bytes", "image/png")
        client.checkpoint("half", label="one")
        asyncio.run(purge_records(url, stream, "half"))
        assert asyncio.run(objects_of(url, stream, "half"))

        assert client.delete("half") is False
        assert asyncio.run(objects_of(url, stream, "half")) == []
