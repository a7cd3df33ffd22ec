"""kill -9 of the daemon during a restore and a fork whose conversations are paged
(docs/design.md#message-pages): at ``op_after_pages`` (the pages are stored, the rebase record
is not written) and at ``op_after_rebase`` (the rebase is durable, the answer not sent).

After a clean restart: every acknowledged record is there byte for byte, no record
references a page that is missing or damaged (``Verify`` checks every one), every checkpoint
reads back whole, and the run is either as before the operation or holds the restored
conversation; a fork's new run holds the checkpoint's conversation or no conversation at all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import grpc
import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import stub
from tests.long_reads import read_turns

RUN = "paged"
pytestmark = pytest.mark.slow


class Prepared:
    def __init__(self, data: Path, records: list[bytes], cp: str, at_cp: list[Any]) -> None:
        self.data, self.records, self.cp, self.at_cp = data, records, cp, at_cp


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    base = tmp_path_factory.mktemp("prep")
    with Daemon(base, "file") as d, jc.connect(str(d.socket)) as c:
        with c.start(RUN, FP, "read the repository") as run:
            read_turns(run, "early", 3)
        cp = c.checkpoint(RUN, label="after the early reads")
        at_cp = c.fold(RUN).messages
        with c.resume(RUN, FP) as run:
            read_turns(run, "late", 2)
        records = [r.canonical for r in c.load(RUN)]
    return Prepared(base / "data", records, cp.checkpoint_id, at_cp)


def messages(s: Any, run_id: str) -> list[dict[str, Any]]:
    state = s.Fold(pb.FoldRequest(run_id=run_id)).state
    return [{"role": m.role, "content": json.loads(m.content_json)} for m in state.messages]


def crash(prepared: Prepared, tmp_path: Path, spec: str, op: str) -> Path:
    data = tmp_path / "data"
    shutil.copytree(prepared.data, data)
    (data / "daemon.lock").unlink(missing_ok=True)
    armed = Daemon(tmp_path, "file", data_dir=data, env={"JOURNALD_FAILPOINTS": spec}).start()
    s = stub(armed.target)
    calls = {
        "restore": lambda: s.Restore(
            pb.RestoreRequest(run_id=RUN, checkpoint_id=prepared.cp), timeout=30
        ),
        "fork": lambda: s.Fork(
            pb.ForkRequest(run_id=RUN, checkpoint_id=prepared.cp, new_run_id="forked"),
            timeout=30,
        ),
        "fork_head": lambda: s.Fork(pb.ForkRequest(run_id=RUN, new_run_id="forked"), timeout=30),
    }
    with pytest.raises(grpc.RpcError) as info:  # the daemon dies mid-call
        calls[op]()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    armed.proc.wait(timeout=20)  # type: ignore[union-attr]
    assert armed.proc.returncode == -9  # type: ignore[union-attr]
    return data


@pytest.mark.parametrize("spec", ["op_after_pages=kill", "op_after_rebase=kill"])
@pytest.mark.parametrize("op", ["restore", "fork", "fork_head"])
def test_a_kill_between_page_writes_and_the_rebase_loses_nothing_and_references_no_missing_page(
    prepared: Prepared, tmp_path: Path, spec: str, op: str
) -> None:
    data = crash(prepared, tmp_path, spec, op)
    with Daemon(tmp_path, "file", data_dir=data) as clean:
        s = stub(clean.target)
        raw = [r.record.canonical for r in s.Load(pb.LoadRequest(run_id=RUN))]
        assert raw[: len(prepared.records)] == prepared.records  # nothing acknowledged lost
        runs = [r.run_id for r in s.List(pb.ListRequest()).runs]
        for run_id in runs:
            s.Verify(pb.VerifyRequest(run_id=run_id))  # every referenced page, checked
            for cp in s.ListCheckpoints(pb.ListCheckpointsRequest(run_id=run_id)).checkpoints:
                s.ExportCheckpoint(  # reads every page of the checkpoint back
                    pb.ExportCheckpointRequest(run_id=run_id, checkpoint_id=cp.checkpoint_id)
                )
        if op == "restore":
            done = len(raw) == len(prepared.records) + 1
            assert done == spec.startswith("op_after_rebase")
            if done:
                assert messages(s, RUN) == prepared.at_cp
        elif "forked" in runs:
            forked = [r.record for r in s.Load(pb.LoadRequest(run_id="forked"))]
            if len(forked) > 1:  # the rebase made it: it holds the whole conversation
                assert forked[1].WhichOneof("payload") == "rebase"
                want = prepared.at_cp if op == "fork" else messages(s, RUN)
                assert messages(s, "forked") == want
            else:
                assert spec.startswith("op_after_pages")
        if spec.startswith("op_after_rebase") and op != "restore":
            assert "forked" in runs
