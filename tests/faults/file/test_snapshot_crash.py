"""kill -9 of the daemon while a lease end writes the run's fold snapshot, whose conversation is
paged (docs/design.md#message-pages, docs/design.md#fold-snapshots): at
``snapshot_before_write`` (the snapshot's new pages are stored, the snapshot is not written)
and at ``snapshot_after_write`` (the snapshot is durable, the fold marks are not saved).

After a clean restart: every acknowledged record is there byte for byte, ``Verify`` passes,
the stored snapshot names no page that is missing or does not hash to its name, and the run
folds (from the snapshot, or past a stale one) to the conversation that was acknowledged.
The same for a run of answered tool calls whose ids are sealed in chunks
(docs/design.md#answered-ids): the stored snapshot names no chunk that is missing or damaged,
and a new chain continues the old one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import stub
from tests.long_reads import READ_BYTES, read_turns

RUN = "snapshotted"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dormant run whose first lease end left a paged snapshot."""
    base = tmp_path_factory.mktemp("prep")
    with (
        Daemon(base, "file") as d,
        jc.connect(str(d.socket)) as c,
        c.start(RUN, FP, "read the repository") as run,
    ):
        read_turns(run, "early", 3)
    assert snapshot_pages(base / "data"), "the first lease end left no paged snapshot"
    return base / "data"


def run_dir(data: Path) -> Path:
    return data / "sessions" / RUN


def snapshot_pages(data: Path) -> list[str]:
    doc = json.loads((run_dir(data) / "checkpoints" / "fold-snapshot.json").read_bytes())
    return [p["sha256"] for p in doc["snapshot"].get("message_pages", [])]


def messages(s: Any, run_id: str) -> list[dict[str, Any]]:
    state = s.Fold(pb.FoldRequest(run_id=run_id)).state
    return [{"role": m.role, "content": json.loads(m.content_json)} for m in state.messages]


@pytest.mark.parametrize("point", ["snapshot_before_write", "snapshot_after_write"])
def test_a_kill_while_a_lease_end_writes_its_paged_snapshot_loses_no_record_and_no_page(
    prepared: Path, tmp_path: Path, point: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    (data / "daemon.lock").unlink(missing_ok=True)
    before = snapshot_pages(data)
    env = {"JOURNALD_FAILPOINTS": f"{point}=kill"}
    armed = Daemon(tmp_path, "file", data_dir=data, env=env).start()
    with jc.connect(str(armed.socket)) as c:
        run = c.resume(RUN, FP)
        read_turns(run, "late", 2)  # acknowledged: each call returned
        acked = [r.canonical for r in c.load(RUN)]
        want = messages(stub(armed.target), RUN)  # the acknowledged conversation
        run.close()  # the lease end's hook runs after the release is answered
        armed.proc.wait(timeout=30)  # type: ignore[union-attr]  # it dies at the point
    assert armed.proc.returncode == -9  # type: ignore[union-attr]

    after = snapshot_pages(data)
    if point == "snapshot_before_write":
        assert after == before  # the old snapshot stands; its pages too
    else:
        assert len(after) > len(before)  # the new snapshot names the late pages
    for digest in after:  # every page the stored snapshot names is there and whole
        raw = (run_dir(data) / "attachments" / digest).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == digest

    with Daemon(tmp_path, "file", data_dir=data) as clean:
        s = stub(clean.target)
        raw_records = [r.record.canonical for r in s.Load(pb.LoadRequest(run_id=RUN))]
        assert raw_records == acked  # nothing acknowledged lost, nothing added
        s.Verify(pb.VerifyRequest(run_id=RUN))
        assert messages(s, RUN) == want
        assert len(json.dumps(want)) > 5 * READ_BYTES  # the early reads and the late ones
        with jc.connect(str(clean.socket)) as c, c.resume(RUN, FP) as run:
            assert run.last_seq == len(acked)  # a windowed Open continues from it


CALLS_RUN = "called"


def short_calls(run: jc.Run, prefix: str, n: int) -> None:
    """``n`` answered calls with provider-length ids (~500 fill one answered-id chunk)."""
    for i in range(n):
        tid = f"toolu_{prefix}{i:020d}"
        call = {"type": "tool_use", "id": tid, "name": "read", "input": "{}"}
        run.assistant([call], stop_reason="tool_use")
        run.tool_result(tid, f"r{i}")
    run.assistant("done", stop_reason="end_turn")


def snapshot_chunks(data: Path) -> list[str]:
    """The answered-id chunks the stored snapshot of ``CALLS_RUN`` names, each read and
    checked against its name (newest first)."""
    run = data / "sessions" / CALLS_RUN
    doc = json.loads((run / "checkpoints" / "fold-snapshot.json").read_bytes())["snapshot"]
    ref = (doc.get("answered") or {}).get("head")
    out = []
    while ref is not None:
        raw = (run / "attachments" / ref["sha256"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == ref["sha256"]
        out.append(ref["sha256"])
        ref = json.loads(raw)["prev"]
    return out


@pytest.mark.parametrize("point", ["snapshot_before_write", "snapshot_after_write"])
def test_a_kill_while_a_lease_end_writes_answered_chunks_loses_no_record_and_no_chunk(
    tmp_path: Path, point: str
) -> None:
    prep = tmp_path / "prep"
    prep.mkdir()
    with (
        Daemon(prep, "file") as d,
        jc.connect(str(d.socket)) as c,
        c.start(CALLS_RUN, FP, "call tools") as run,
    ):
        short_calls(run, "a", 600)
    data = tmp_path / "data"
    shutil.copytree(prep / "data", data)
    (data / "daemon.lock").unlink(missing_ok=True)
    before = snapshot_chunks(data)
    assert before, "the first lease end sealed no answered ids"
    armed = Daemon(tmp_path, "file", data_dir=data, env={"JOURNALD_FAILPOINTS": f"{point}=kill"})
    with armed, jc.connect(str(armed.socket)) as c:
        run = c.resume(CALLS_RUN, FP)
        short_calls(run, "b", 600)  # acknowledged, and more than one chunk's worth
        acked = [r.canonical for r in c.load(CALLS_RUN)]
        run.close()
        armed.proc.wait(timeout=30)  # type: ignore[union-attr]  # it dies at the point
    assert armed.proc.returncode == -9  # type: ignore[union-attr]
    after = snapshot_chunks(data)  # every chunk the stored snapshot names is there, whole
    if point == "snapshot_before_write":
        assert after == before
    else:
        assert len(after) > len(before)
        assert after[-len(before) :] == before  # the new chain continues the old one
    with Daemon(tmp_path, "file", data_dir=data) as clean, jc.connect(str(clean.socket)) as c:
        assert [r.canonical for r in c.load(CALLS_RUN)] == acked
        c.verify(CALLS_RUN)
        assert c.fold(CALLS_RUN).last_seq == len(acked)
