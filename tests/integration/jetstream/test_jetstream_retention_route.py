"""A stream whose retention cannot be edited: the printed route gets every run to a stream
journald accepts, with the same name, byte for byte.

A work-queue stream (the server never changes that retention) holds two journald runs. The
real `journald serve` refuses it and prints four commands: copy the runs out with `journald
migrate` (which reads the stream without consuming anything), remove the stream, create it
again, copy the runs back. The test runs exactly those lines (the `nats` ones with the pinned
natscli), then starts the daemon on the same stream and reads both runs back through it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import journald_client as jc
import nats
import pytest

from tests.builders import JournalBuilder, user_payload
from tests.daemon import JOURNALD, Daemon
from tests.nats_server import NatsServer, create_stream
from tests.natscli import printed_commands, run_all, run_printed

pytestmark = pytest.mark.timeout(1800)  # natscli may be built on first use


def two_runs() -> dict[str, JournalBuilder]:
    runs = {}
    for run_id, turns in (("wq-first", 2), ("wq-second", 1)):
        b = JournalBuilder(run_id, prompt=f"prompt of {run_id}")
        for i in range(turns):
            b.turn([f"{run_id}-{i}"])
            b.add("user", user_payload(f"follow-up {i}"))
        runs[run_id] = b
    return runs


async def publish_runs(url: str, prefix: str, runs: dict[str, JournalBuilder]) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for run_id, b in runs.items():
            for rec in b.records:
                await js.publish(f"{prefix}.{run_id}.{rec.seq}", rec.raw)
    finally:
        await nc.close()


async def stored_messages(url: str, stream: str) -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jsm().stream_info(stream)).state.messages)
    finally:
        await nc.close()


def test_the_printed_route_moves_the_runs_of_a_work_queue_stream_to_a_safe_one(
    tmp_path: Path, natscli: str, start_nats: Callable[..., NatsServer]
) -> None:
    server = start_nats()
    runs = two_runs()
    asyncio.run(create_stream(server.url, "WQ", "wq", retention="workqueue"))
    asyncio.run(publish_runs(server.url, "wq", runs))
    total = sum(len(b.records) for b in runs.values())
    flags = ["--backend", "jetstream", "--nats-url", server.url, "--stream", "WQ"]
    sock = f"/tmp/jd-wq-{os.getpid()}/s.sock"
    refused = subprocess.run(
        [*JOURNALD, "serve", "--data-dir", str(tmp_path / "d0"), "--socket", sock, *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert "retention is workqueue" in refused.stderr
    route = printed_commands(refused.stderr)
    assert [c.split()[:2] for c in route] == [
        ["journald", "migrate"],
        ["nats", "--server"],
        ["nats", "--server"],
        ["journald", "migrate"],
    ], refused.stderr

    run_all(route[:1], natscli, tmp_path / "home", cwd=tmp_path)
    # the copy only read the stream: a work queue would have dropped what it delivered
    assert asyncio.run(stored_messages(server.url, "WQ")) == total
    run_all(route[1:], natscli, tmp_path / "home", cwd=tmp_path)

    (tmp_path / "after").mkdir()
    with (
        Daemon(tmp_path / "after", "jetstream", *flags[2:]) as daemon,
        jc.connect(str(daemon.socket)) as client,
    ):
        assert sorted(i.run_id for i in client.list()) == sorted(runs)
        for run_id, b in runs.items():
            assert [r.canonical for r in client.load(run_id)] == [r.raw for r in b.records]
            assert client.verify(run_id).last_hash == b.records[-1].hash


def test_the_route_of_a_stream_without_buckets_creates_them_and_migrate_prints_whole_lines(
    tmp_path: Path, natscli: str, start_nats: Callable[..., NatsServer]
) -> None:
    """A work-queue stream an operator made for something else has no journald buckets: the
    recreated stream needs both, and its lease bucket, before the runs can be copied back.
    And a refusal printed by `journald migrate` into a pipe keeps each command on one line
    (rich would wrap it at 80 columns), so it can be pasted."""
    server = start_nats()
    runs = two_runs()
    asyncio.run(create_stream(server.url, "WQB", "wqb", retention="workqueue", buckets=False))
    asyncio.run(publish_runs(server.url, "wqb", runs))
    flags = ["--backend", "jetstream", "--nats-url", server.url, "--stream", "WQB"]
    sock = f"/tmp/jd-wqb-{os.getpid()}/s.sock"
    refused = subprocess.run(
        [*JOURNALD, "serve", "--data-dir", str(tmp_path / "d0"), "--socket", sock, *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    route = printed_commands(refused.stderr)
    assert len(route) == 7, refused.stderr
    assert route[0].startswith("journald migrate ")
    assert route[0].endswith(" --to file:./journald-copy-of-WQB")
    assert [c.split()[3:6] for c in route[1:6]] == [
        ["stream", "rm", "WQB"],
        ["stream", "add", "WQB"],
        ["object", "add", "WQB_CHECKPOINTS"],
        ["object", "add", "WQB_ATTACHMENTS"],
        ["kv", "add", "WQB_LEASES"],
    ], refused.stderr
    assert route[6].endswith(f" --to jetstream:{server.url}/WQB")
    home = tmp_path / "home"
    run_all(route[:3], natscli, home, cwd=tmp_path)

    # the copy back before the buckets exist: refused, naming the two commands, each whole
    early = run_printed(route[6], natscli, home, cwd=tmp_path)
    assert early.returncode != 0, early.stderr
    assert printed_commands(early.stderr) == route[3:5], early.stderr
    assert all(len(c) > 80 for c in route[3:5])  # long enough that rich would have wrapped it

    run_all(route[3:], natscli, home, cwd=tmp_path)
    (tmp_path / "after").mkdir()
    with (
        Daemon(tmp_path / "after", "jetstream", *flags[2:]) as daemon,
        jc.connect(str(daemon.socket)) as client,
    ):
        assert sorted(i.run_id for i in client.list()) == sorted(runs)
        for run_id, b in runs.items():
            assert [r.canonical for r in client.load(run_id)] == [r.raw for r in b.records]
