"""A restore or fork of a long conversation names its pages through page-reference chunks
(docs/protocol.md#page-reference-chunks): the rebase record stays a few KB whatever the
page count, folds to the checkpoint's conversation, and a client resolves it chunk first;
a missing chunk is ``store_corrupted`` naming it (issue 31 item 2).

Before chunks the rebase listed every page reference (~100 bytes each): 260 pages gave a
~26 KB record, ~8,000 pages (1 GB) ~800 KB, above a JetStream ``max_payload`` of 1 MB."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import journald_client as jc
import pytest

from journald.cli.migrate import main
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.jetstream.test_jetstream_side_data import objects_of
from tests.long_reads import PAGE_RESULT_BYTES, start_with_page_reads
from tests.nats_server import NatsServer, create_stream
from tests.storage.backend_jetstream import fresh_stream

RESULT_BYTES = PAGE_RESULT_BYTES
TURNS = 260  # two full chunks of 128 page references and a few loose ones
RECORD_BOUND = 4 * 1024  # chunk references, loose references and a short tail


def long_reads(client: jc.Client, run_id: str) -> None:
    start_with_page_reads(client, run_id, TURNS, RESULT_BYTES)


def chunked_rebase(client: jc.Client, run_id: str) -> jc.JournalRecord:
    rebase = list(client.load(run_id))[-1]
    assert rebase.kind == "rebase"
    assert len(rebase.page_chunks) == 2
    assert len(rebase.canonical) < RECORD_BOUND  # not ~100 bytes per page
    return rebase


def restore_and_fork(client: jc.Client, run_id: str) -> None:
    long_reads(client, run_id)
    cp = client.checkpoint(run_id, label="after the reads")
    want = client.fold(run_id).messages
    with client.resume(run_id, FP) as run:
        run.user("now forget all that")
    client.restore(run_id, cp.checkpoint_id)
    assert client.fold(run_id).messages == want
    rebase = chunked_rebase(client, run_id)
    assert rebase.paged_messages + len(rebase.payload["messages"]) == len(want)
    # a reader of the record resolves it chunk first, then pages, then the tail
    assert rebase.conversation(lambda d: client.get_attachment(run_id, d)) == want

    # the new run's state (~34 MB here) is above the daemon's 16 MiB message limit: Fork
    # answers the newest messages that fit, and the client pages the rest through History
    new_run, forked = client.fork(run_id, checkpoint_id=cp.checkpoint_id, new_run_id="forked")
    assert new_run == "forked"
    assert forked.messages == want
    assert client.fold("forked").messages == want
    chunked_rebase(client, "forked")
    for name in (run_id, "forked"):
        client.verify(name)  # every chunk and page it names is there and hashes right


@pytest.mark.slow
def test_a_restore_and_a_fork_of_260_pages_write_a_rebase_of_a_few_kb_on_the_file_backend(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        restore_and_fork(client, "reads")


@pytest.mark.slow
def test_a_restore_and_a_fork_of_260_pages_succeed_on_jetstream_with_1_mib_payloads(
    tmp_path: Path, small_payload_nats: NatsServer
) -> None:
    url = small_payload_nats.url
    asyncio.run(create_stream(url, "CHUNKED", "chunked"))
    sock = Path(f"/tmp/jd-chunked-{os.getpid()}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", "CHUNKED", socket=sock) as d,
        jc.connect(str(d.socket)) as client,
    ):
        restore_and_fork(client, "reads")


@pytest.mark.slow
def test_verify_and_recover_of_a_rebase_whose_chunk_is_missing_name_the_chunk(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        long_reads(client, "reads")
        cp = client.checkpoint("reads")
        client.restore("reads", cp.checkpoint_id)
        chunk = chunked_rebase(client, "reads").page_chunks[0].sha256
        [path] = list(d.data_dir.rglob(f"attachments/{chunk}"))
        raw = path.read_bytes()
        path.unlink()
        with pytest.raises(jc.StoreCorrupted) as err:
            client.verify("reads")
        assert err.value.metadata["chunk"] == chunk
        assert chunk in str(err.value)
        with pytest.raises(jc.StoreCorrupted) as err:  # it cannot rebuild what it lacks
            client.recover("reads")
        assert err.value.metadata["chunk"] == chunk
        path.write_bytes(raw)
        client.verify("reads")


@pytest.mark.slow
def test_migrate_to_jetstream_carries_the_chunks_a_rebase_names(tmp_path: Path) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    src = tmp_path / "a"
    for name in ("d1", "d2"):
        (tmp_path / name).mkdir()
    with Daemon(tmp_path / "d1", "file", data_dir=src) as d, jc.connect(str(d.socket)) as client:
        long_reads(client, "moving")
        client.restore("moving", client.checkpoint("moving").checkpoint_id)
        want = client.fold("moving").messages
        chunks = {f"moving/{c.sha256}" for c in chunked_rebase(client, "moving").page_chunks}
    assert main(["--quiet", "--from", f"file:{src}", "--to", f"jetstream:{url}/{stream}"]) == 0
    sock = Path(f"/tmp/jd-chunks-{os.getpid()}-{stream}/s")
    with (
        Daemon(
            tmp_path / "d2", "jetstream", "--nats-url", url, "--stream", stream, socket=sock
        ) as d,
        jc.connect(str(d.socket)) as client,
    ):
        assert chunks <= set(asyncio.run(objects_of(url, stream, "moving")))
        client.verify("moving")
        assert client.fold("moving").messages == want
