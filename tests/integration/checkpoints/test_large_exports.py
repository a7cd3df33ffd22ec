"""A checkpoint larger than one gRPC message moves by export and import (docs/protocol.md
#checkpoints): thirty reads of 800 KB (a ~24 MiB conversation) checkpoint, export, import
into another run and restore to the same fold.

Before the chunked RPCs the export was one ExportCheckpoint answer, refused with
``response_too_large`` above the daemon's 16 MiB message size, and an import was one
ImportCheckpoint request, refused by gRPC above that size: the checkpoint, restore and fork
of such a conversation worked, moving it did not.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.nats_server import NatsServer, create_stream

READ_BYTES = 800 * 1024
READS = 30  # ~24 MiB of tool output: one and a half times the 16 MiB message size
MESSAGE_BYTES = 16 * 1024 * 1024


def file_text(i: int) -> str:
    line = f"# file {i}: " + "y" * 70 + "\n"
    return (line * (READ_BYTES // len(line) + 1))[:READ_BYTES]


def thirty_file_reads(client: jc.Client, run_id: str) -> None:
    with client.start(run_id, FP, "read the whole repository") as run:
        for i in range(READS):
            tid = f"read_{i}"
            call = {"type": "tool_use", "id": tid, "name": "read_file", "input": f'{{"i": {i}}}'}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(tid, file_text(i))
        run.assistant("I read all thirty files.", stop_reason="end_turn")


def export_import_restore(client: jc.Client) -> None:
    thirty_file_reads(client, "reads")
    cp = client.checkpoint("reads", label="after the reads")
    want = client.fold("reads").messages

    exported = client.export_checkpoint("reads", cp.checkpoint_id)
    assert len(exported) > MESSAGE_BYTES + READS * 1024  # more than one message holds

    with client.start("elsewhere", FP, "another machine") as run:
        run.assistant("ready", stop_reason="end_turn")
    imp = client.import_checkpoint("elsewhere", exported)
    assert imp.hash == cp.hash
    assert imp.message_count == len(want)
    assert client.restore("elsewhere", imp.checkpoint_id).to_messages == len(want)
    assert client.fold("elsewhere").messages == want
    # the imported checkpoint exports to the same conversation again
    again = client.export_checkpoint("elsewhere", imp.checkpoint_id)
    assert len(again) > MESSAGE_BYTES
    client.verify("elsewhere")


def test_a_24_mib_checkpoint_exports_imports_into_another_run_and_restores_the_same_fold(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        export_import_restore(client)


@pytest.mark.slow
def test_a_24_mib_checkpoint_moves_by_export_on_jetstream_with_1_mib_payloads(
    tmp_path: Path, small_payload_nats: NatsServer
) -> None:
    url = small_payload_nats.url
    asyncio.run(create_stream(url, "MOVES", "moves"))
    sock = Path(f"/tmp/jd-moves-{os.getpid()}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", "MOVES", socket=sock) as d,
        jc.connect(str(d.socket)) as client,
    ):
        export_import_restore(client)
