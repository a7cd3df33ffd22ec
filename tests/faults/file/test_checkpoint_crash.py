"""kill -9 of the daemon at each step of a checkpoint write, a compaction and a restore.

Each case copies one prepared data directory (a run with a checkpoint ``mark``), starts a
daemon armed to SIGKILL itself at one step, asks for the operation (the call fails when the
daemon dies), then starts a clean daemon on the same directory and checks:

* the journal is the state before (the prepared records) or the state after (exactly one
  more record: the rebase with the expected conversation), never anything else;
* the run opens for writing and takes the next append;
* every listed checkpoint is intact (it exports, so its bytes match its hash), the prepared
  one is unchanged, and a new checkpoint, if any, holds the pre-operation conversation.

Every step is armed with ``JOURNALD_FAILPOINTS``: the checkpoint's ``cp_*`` and ``op_*``
points, and the rebase append's journal points (the rebase is the daemon's first write).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core.checkpoints import content_hash
from journald.core.governance import sanitize
from journald.core.paging import tail_start
from tests.builders import text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, stub, until_unlocked

RUN = "crashy"
SUMMARY = "summary of the early turns"
KEEP = 3

CP_STEPS = ["cp_before_write", "cp_after_temp_write", "cp_after_rename"]
OP_STEPS = [
    "cp_after_temp_write=kill",
    "op_after_checkpoint=kill",
    "before_write=kill@1",
    "after_write_before_fsync=kill@1",
    "after_fsync_before_advance=kill@1",
    "op_after_rebase=kill",
]

Conversation = list[dict[str, Any]]
pytestmark = pytest.mark.slow


def msgs_of(messages: Any) -> Conversation:
    return [{"role": m.role, "content": json.loads(m.content_json)} for m in messages]


class Prepared:
    def __init__(self, data: Path, records: list[bytes], mark: pb.CheckpointMeta) -> None:
        self.data = data
        self.records = records
        self.mark = mark


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    base = tmp_path_factory.mktemp("prep")
    with Daemon(base, "file") as d:
        s = stub(d.target)
        lease = Lease(s, RUN)
        for i in range(2):
            lease.append(lease.assistant(f"early-{i}"))
            lease.append(lease.result(f"early-{i}"))
        lease.append(lease.assistant())
        mark = s.Checkpoint(pb.CheckpointRequest(run_id=RUN, label="mark")).checkpoint
        for i in range(3):
            lease.append(lease.assistant(f"late-{i}"))
            lease.append(lease.result(f"late-{i}"))
        lease.append(lease.assistant())
        lease.close()
        records = until_unlocked(
            lambda: [r.record.canonical for r in s.Load(pb.LoadRequest(run_id=RUN))]
        )
    return Prepared(base / "data", records, mark)


def head(s: Any) -> Conversation:
    return msgs_of(s.Fold(pb.FoldRequest(run_id=RUN)).state.messages)


def crash_and_check(
    prepared: Prepared,
    tmp_path: Path,
    env: dict[str, str],
    op: str,
) -> str:
    data = tmp_path / "data"
    shutil.copytree(prepared.data, data)
    (data / "daemon.lock").unlink(missing_ok=True)
    armed = Daemon(tmp_path, "file", data_dir=data, env=env).start()
    s = stub(armed.target)
    before = head(s)
    mark = prepared.mark
    summary = [pb.Message(role="user", content_json=blocks(text(SUMMARY)))]
    calls = {
        "checkpoint": lambda: s.Checkpoint(
            pb.CheckpointRequest(run_id=RUN, label="crash"), timeout=20
        ),
        "compact": lambda: s.Compact(
            pb.CompactRequest(run_id=RUN, summary=summary, keep_last=KEEP), timeout=20
        ),
        "restore": lambda: s.Restore(
            pb.RestoreRequest(run_id=RUN, checkpoint_id=mark.checkpoint_id), timeout=20
        ),
    }
    with pytest.raises(grpc.RpcError) as info:  # the daemon dies mid-call
        calls[op]()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    armed.proc.wait(timeout=20)  # type: ignore[union-attr]
    assert armed.proc.returncode == -9  # type: ignore[union-attr]

    with Daemon(tmp_path, "file", data_dir=data) as clean:
        s = stub(clean.target)
        records = [r.record for r in s.Load(pb.LoadRequest(run_id=RUN))]
        raw = [r.canonical for r in records]
        if op == "compact":
            msgs = sanitize(before)[0]
            after = sanitize(
                [{"role": "user", "content": [text(SUMMARY)]}, *msgs[tail_start(msgs, KEEP) :]]
            )[0]
        else:
            restored = s.ExportCheckpoint(
                pb.ExportCheckpointRequest(run_id=RUN, checkpoint_id=mark.checkpoint_id)
            ).data
            after = json.loads(restored)["body"]["messages"]
        if raw == prepared.records:
            outcome = "before"
            assert head(s) == before
        else:
            outcome = "after"
            assert op != "checkpoint"
            assert raw[:-1] == prepared.records
            assert records[-1].WhichOneof("payload") == "rebase"
            assert head(s) == after
        cps = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id=RUN)).checkpoints
        assert cps[0] == mark
        for cp in cps:
            data_bytes = s.ExportCheckpoint(
                pb.ExportCheckpointRequest(run_id=RUN, checkpoint_id=cp.checkpoint_id)
            ).data
            body = json.loads(data_bytes)["body"]
            assert content_hash(body["messages"]) == cp.hash
            if cp != mark:
                assert body["messages"] == sanitize(before)[0]
        if outcome == "after":
            assert len(cps) == 2  # the pre-operation checkpoint is there and intact
        lease = Lease(s, RUN, mode=pb.OPEN_MODE_RESUME)
        lease.append(lease.assistant())
        lease.close()
    return outcome


@pytest.mark.parametrize("step", CP_STEPS)
def test_a_crash_while_writing_a_checkpoint_leaves_no_half_checkpoint(
    prepared: Prepared, tmp_path: Path, step: str
) -> None:
    env = {"JOURNALD_FAILPOINTS": f"{step}=kill"}
    assert crash_and_check(prepared, tmp_path, env, "checkpoint") == "before"


@pytest.mark.parametrize("spec", OP_STEPS)
@pytest.mark.parametrize("op", ["compact", "restore"])
def test_a_crash_during_compaction_or_restore_leaves_the_state_before_or_after(
    prepared: Prepared, tmp_path: Path, op: str, spec: str
) -> None:
    outcome = crash_and_check(prepared, tmp_path, {"JOURNALD_FAILPOINTS": spec}, op)
    durable = spec.startswith(("after_fsync", "op_after_rebase"))
    not_yet = spec.startswith(("cp_", "op_after_checkpoint", "before_write"))
    if durable:
        assert outcome == "after"
    if not_yet:
        assert outcome == "before"
