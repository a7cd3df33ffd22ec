"""After a restore or a fork of a checkpoint of many pages, a dormant read of the run folds the
rebase with its pages sealed (docs/design.md#lazy-rebases, issue 31 item 3): a History tail
page and a windowed Open of a run without a usable fold snapshot (migrated, recovered, a
daemon killed before the lease end) read the pages they return, not every page the rebase
names (before: the fold read and decoded the whole conversation, and held it).

A real daemon on the file backend; the bytes are the daemon's ``rchar``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.server.convert import message_from_pb
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.long_reads import PAGE_RESULT_BYTES, start_with_page_reads

RESULT_BYTES = PAGE_RESULT_BYTES
TURNS = 100  # ~13 MB of conversation: the fork's whole-state answer stays under 16 MiB
PAGE = 10


def long_reads(client: jc.Client, run_id: str) -> None:
    start_with_page_reads(client, run_id, TURNS, RESULT_BYTES)


def rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def stub(d: Daemon) -> Any:
    channel = grpc.insecure_channel(
        d.target, options=[("grpc.max_receive_message_length", 1 << 28)]
    )
    return pbg.JournalServiceStub(channel)


def tail(s: Any, run_id: str, total: int) -> Any:
    return s.History(
        pb.HistoryRequest(
            run_id=run_id, offset=max(0, total - PAGE), limit=PAGE, view=pb.HISTORY_VIEW_STATE
        )
    )


def windowed_open(s: Any, run_id: str) -> Any:
    call = s.Open(
        pb.OpenRequest(
            run_id=run_id,
            mode=pb.OPEN_MODE_RESUME,
            fingerprint=FP.to_pb(),
            message_window=PAGE,
        )
    )
    first = next(iter(call))
    s.Release(pb.ReleaseRequest(run_id=run_id, lease_id=first.lease.lease_id))
    call.cancel()
    return first


@pytest.mark.slow
def test_a_tail_page_and_a_windowed_open_after_a_fork_read_their_pages_not_every_page(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        long_reads(client, "reads")
        cp = client.checkpoint("reads", label="after the reads")
        want = client.fold("reads").messages
        with client.resume("reads", FP) as run:
            run.user("now forget all that")
        client.restore("reads", cp.checkpoint_id)
        client.fork("reads", checkpoint_id=cp.checkpoint_id, new_run_id="forked")
        with client.start("tiny", FP, "hello") as run:
            run.assistant("hi", stop_reason="end_turn")
    conversation = sum(len(str(m)) for m in want)
    assert conversation > TURNS * RESULT_BYTES
    for run_id in ("reads", "forked"):  # no usable snapshot: the next read folds from seq 1
        (data / "sessions" / run_id / "checkpoints" / "fold-snapshot.json").unlink()

    with Daemon(tmp_path, "file", data_dir=data) as d:
        s = stub(d)
        tail(s, "tiny", 2)  # the daemon's own first reads
        before = rchar(d.pid)
        page = tail(s, "forked", len(want))
        opened = windowed_open(s, "forked")
        read = rchar(d.pid) - before
        got = [message_from_pb(m, "m") for m in page.messages]
        assert got == want[page.offset : page.next_offset]
        assert page.total == len(want)
        window = [message_from_pb(m, "m") for m in opened.lease.state.messages]
        assert window == want[len(want) - len(window) :]
        assert read < conversation // 4, (read, conversation)  # a few pages, not ~100
        restored = tail(s, "reads", len(want))
        assert [message_from_pb(m, "m") for m in restored.messages] == got
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        for run_id in ("reads", "forked"):
            assert client.fold(run_id).messages == want  # the whole conversation, by page
            client.verify(run_id)  # every page the rebase names is there and hashes right
