"""The issue-31 reproduction: a coding agent reads six files of 800 KB, checkpoints, and
restores and forks that checkpoint, on the file backend and on JetStream behind a server
whose ``max_payload`` is 1 MiB (docs/design.md#message-pages).

Before message pages, the restore and the fork each inlined the whole 4.8 MB conversation
into one rebase record: refused with ``invalid_record`` (above ``--max-record-bytes`` on
file, above the server's payload limit on JetStream), and the refused restore still left a
``pre_restore`` checkpoint behind.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.long_reads import default_view_reads_whole
from tests.nats_server import NatsServer, create_stream

READ_BYTES = 800 * 1024
READS = 6


def file_text(i: int) -> str:
    line = f"# file {i}: " + "x" * 70 + "\n"
    return (line * (READ_BYTES // len(line) + 1))[:READ_BYTES]


def six_file_reads(client: jc.Client, run_id: str) -> None:
    with client.start(run_id, FP, "read the repository and summarise it") as run:
        for i in range(READS):
            tid = f"read_{i}"
            call = {"type": "tool_use", "id": tid, "name": "read_file", "input": f'{{"i": {i}}}'}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(tid, file_text(i))
        run.assistant("I read all six files.", stop_reason="end_turn")


def texts_of(messages: list[dict[str, object]]) -> str:
    return json.dumps(messages, sort_keys=True)


def restore_and_fork(client: jc.Client, run_id: str) -> None:
    six_file_reads(client, run_id)
    cp = client.checkpoint(run_id, label="after the reads")
    want = client.fold(run_id).messages
    assert len(texts_of(want)) > READS * READ_BYTES

    with client.resume(run_id, FP) as run:
        run.user("now forget all that")
    restored = client.restore(run_id, cp.checkpoint_id)
    assert restored.pre_restore_checkpoint_id
    assert client.fold(run_id).messages == want
    rebase = list(client.load(run_id))[-1]
    assert rebase.kind == "rebase"
    assert rebase.payload["pages"]
    assert len(rebase.canonical) < 64 * 1024  # references and a short tail, not 4.8 MB

    fork_id, _state = client.fork(run_id, checkpoint_id=cp.checkpoint_id, new_run_id="forked")
    assert fork_id == "forked"
    assert client.fold("forked").messages == want
    head_fork, _ = client.fork(run_id, new_run_id="forked-head")
    assert client.fold(head_fork).messages == want
    for name in (run_id, "forked", "forked-head"):
        client.verify(name)  # every referenced page is there and hashes right

    exported = client.export_checkpoint(run_id, cp.checkpoint_id)
    with client.start("imported", FP, "elsewhere") as run:
        run.assistant("ready", stop_reason="end_turn")
    imp = client.import_checkpoint("imported", exported)
    assert client.restore("imported", imp.checkpoint_id).to_messages == len(want)
    assert client.fold("imported").messages == want


def test_six_800_kb_reads_checkpoint_restore_and_fork_on_the_file_backend(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        restore_and_fork(client, "reads")


@pytest.mark.slow
def test_six_800_kb_reads_checkpoint_restore_and_fork_on_jetstream_with_1_mib_payloads(
    tmp_path: Path, small_payload_nats: NatsServer
) -> None:
    url = small_payload_nats.url
    asyncio.run(create_stream(url, "BIG", "big"))
    sock = Path(f"/tmp/jd-big-{os.getpid()}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", "BIG", socket=sock) as d,
        jc.connect(str(d.socket)) as client,
    ):
        restore_and_fork(client, "reads")


@pytest.mark.slow
def test_the_cleaned_up_view_of_six_800_kb_reads_is_paged_from_its_view_index_on_both_backends(
    tmp_path: Path, small_payload_nats: NatsServer
) -> None:
    url = small_payload_nats.url
    asyncio.run(create_stream(url, "VIEWS", "views"))
    sock = Path(f"/tmp/jd-views-{os.getpid()}/s")
    js = ("jetstream", "--nats-url", url, "--stream", "VIEWS")
    for side in ("js", "file"):
        (tmp_path / side).mkdir()
    with Daemon(tmp_path / "js", *js, socket=sock) as d, jc.connect(str(d.socket)) as client:
        six_file_reads(client, "reads")  # each 800 KB result is a page of its own
    data = tmp_path / "file" / "data"
    with Daemon(tmp_path / "file", "file", data_dir=data) as d, jc.connect(str(d.socket)) as c:
        six_file_reads(c, "reads")
    # restarted daemons: the index the lease end saved (its carry names the large results
    # by fold index instead of copying them)
    index = json.loads(
        (data / "sessions" / "reads" / "checkpoints" / "view-index.json").read_bytes()
    )
    assert len(json.dumps(index)) < 16 * 1024
    with Daemon(tmp_path / "js", *js, socket=sock) as d, jc.connect(str(d.socket)) as client:
        default_view_reads_whole(client, "reads")
    with Daemon(tmp_path / "file", "file", data_dir=data) as d, jc.connect(str(d.socket)) as c:
        default_view_reads_whole(c, "reads")
