"""Open folds only the records after the run's fold snapshot (docs/design.md#fold-snapshots).

A lease end saves the folded state beside the run; the next Open continues from it when the
stored record at its seq still has its hash, and folds the run in full otherwise. Runs here
are written by the file store itself (a writer that bypasses the daemon), in small segments.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.clock import utc_ts
from journald.core.fold import fold
from journald.core.records import Record
from journald.server.convert import state_to_pb
from journald.storage.checkpoint_base import pre_prune_hook
from journald.storage.file.checkpoint_store import FileCheckpointStore
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, error_of, stub
from tests.integration.server.test_damaged_runs import flip
from tests.waiting import wait_until

SEGMENT = 20
RUN = "snap"


def write(data: Path, records: list[Record], *, create: bool) -> None:
    async def go() -> None:
        store = FileStore(data, segment_max_records=SEGMENT)
        journal = await (store.create(records[0]) if create else store.open(RUN))
        await journal.append(records[1:] if create else records)
        await journal.close()
        await store.close()

    asyncio.run(go())


def stored(data: Path) -> list[Record]:
    async def go() -> list[Record]:
        store = FileStore(data, segment_max_records=SEGMENT)
        try:
            return list(await store.load(RUN))
        finally:
            await store.close()

    return asyncio.run(go())


def index_file(data: Path) -> Path:
    return data / "sessions" / RUN / "checkpoints" / "fold-snapshot.json"


def resumed_state(d: Daemon) -> pb.RunState:
    """The state an Open (resume, every message) answers; the lease is released after."""
    lease = Lease(stub(d.target), RUN, mode=pb.OPEN_MODE_RESUME)
    lease.release()
    return lease.lease.state


def daemon(tmp_path: Path, data: Path) -> Daemon:
    return Daemon(tmp_path, "file", "--segment-max-records", str(SEGMENT), data_dir=data)


def snapshotted_run(tmp_path: Path, b: JournalBuilder) -> Path:
    """``b``'s records written, resumed once through the daemon (whose lease end saves the
    snapshot at the last seq)."""
    data = tmp_path / "data"
    write(data, b.records, create=True)
    with daemon(tmp_path, data) as d:
        assert resumed_state(d) == state_to_pb(fold(b.records))
    doc = json.loads(index_file(data).read_bytes())
    assert doc["snapshot"]["last_seq"] == len(b.records)
    # the marks History pages from are kept apart: a tail page never reads the snapshot
    marks = json.loads((index_file(data).parent / "fold-mark.json").read_bytes())
    assert set(marks) == {"marks"}
    return data


def turns(b: JournalBuilder, first: int, last: int) -> None:
    for i in range(first, last):
        b.turn([f"call-{i}"])
        if i % 3 == 0:
            b.add("user", {"content": [text(f"follow-up {i}")]})


@pytest.mark.parametrize("snapshot", ["intact", "unreadable"])
def test_open_folds_records_another_writer_appended_after_the_snapshot(
    tmp_path: Path, snapshot: str
) -> None:
    b = JournalBuilder(RUN)
    turns(b, 0, 20)
    data = snapshotted_run(tmp_path, b)
    at = len(b.records)
    turns(b, 20, 26)
    write(data, b.records[at:], create=False)
    if snapshot == "unreadable":
        doc = json.loads(index_file(data).read_bytes())
        doc["snapshot"]["messages"] = "torn"
        index_file(data).write_bytes(json.dumps(doc).encode())
    want = state_to_pb(fold(b.records))
    with daemon(tmp_path, data) as d:
        got = stub(d.target).Fold(pb.FoldRequest(run_id=RUN)).state
        assert got == want  # a dormant read folds the same way, writing nothing
        assert resumed_state(d) == want
        assert resumed_state(d) == want  # from the snapshot the first lease end saved
    assert json.loads(index_file(data).read_bytes())["snapshot"]["last_seq"] == len(b.records)


def test_open_does_not_fold_records_before_the_snapshot_again_and_verify_still_reads_them(
    tmp_path: Path,
) -> None:
    b = JournalBuilder(RUN)
    turns(b, 0, 30)
    data = snapshotted_run(tmp_path, b)
    manifest = json.loads((data / "sessions" / RUN / "manifest.json").read_bytes())
    first = data / "sessions" / RUN / "segments" / manifest["segments"][0]["file"]
    sealed = first.stat()
    first.write_bytes(first.read_bytes().replace(b"thinking aloud", b"thinking alouD", 1))
    # as a bit that rots on disk: no write a stat could see (a write is refused at Open:
    # tests/integration/server/test_scrub.py)
    os.utime(first, ns=(sealed.st_atime_ns, sealed.st_mtime_ns))
    with daemon(tmp_path, data) as d:
        assert resumed_state(d) == state_to_pb(fold(b.records))
        with pytest.raises(grpc.RpcError) as info:
            stub(d.target).Verify(pb.VerifyRequest(run_id=RUN))
        assert error_of(info.value).code == "store_corrupted"


def test_open_after_a_prune_reports_what_the_pruned_run_holds(tmp_path: Path) -> None:
    b = JournalBuilder(RUN)
    turns(b, 0, 12)
    summary = [{"role": "user", "content": [text("summary")]}]
    b.add("rebase", {"reason": "compaction", "messages": summary})
    turns(b, 12, 15)
    data = snapshotted_run(tmp_path, b)

    async def prune() -> None:
        store = FileStore(data, segment_max_records=SEGMENT)
        checkpoints = FileCheckpointStore.colocated_with(store.sessions_dir)
        try:
            assert (await store.prune(RUN, before=pre_prune_hook(checkpoints, utc_ts))).pruned
        finally:
            await store.close()

    asyncio.run(prune())
    kept = stored(data)
    assert len(kept) < len(b.records)
    want = state_to_pb(fold(kept))
    assert want.counters != state_to_pb(fold(b.records)).counters
    with daemon(tmp_path, data) as d:
        assert resumed_state(d) == want


def test_a_lease_end_saves_a_snapshot_only_when_the_run_changed(tmp_path: Path) -> None:
    b = JournalBuilder(RUN)
    turns(b, 0, 10)
    data = snapshotted_run(tmp_path, b)
    before = index_file(data).stat().st_mtime_ns, index_file(data).read_bytes()
    with daemon(tmp_path, data) as d:
        resumed_state(d)
        assert (index_file(data).stat().st_mtime_ns, index_file(data).read_bytes()) == before
        lease = Lease(stub(d.target), RUN, mode=pb.OPEN_MODE_RESUME)
        lease.append(lease.assistant())
        lease.release()
        wait_until(
            lambda: (
                json.loads(index_file(data).read_bytes())["snapshot"]["last_seq"]
                == len(b.records) + 1
            ),
            what="the lease end to save a snapshot of the appended record",
        )


def test_open_after_a_recovery_moved_out_records_the_snapshot_counted_folds_the_survivors(
    tmp_path: Path,
) -> None:
    b = JournalBuilder(RUN)
    turns(b, 0, 5)
    assert len(b.records) < SEGMENT  # one volume: journal.jsonl holds every line
    data = snapshotted_run(tmp_path, b)
    assert b.records[4].kind == "assistant"
    flip(data, RUN, line=4)  # seq 5, which the snapshot counted
    with daemon(tmp_path, data) as d:
        assert stub(d.target).Recover(pb.RecoverRequest(run_id=RUN)).quarantined == 1
        survivors = stored(data)
        assert [r.seq for r in survivors if r.seq <= len(b.records)] == [
            r.seq for r in b.records if r.seq != 5
        ]
        want = state_to_pb(fold(survivors))
        assert want.counters.llm_calls == state_to_pb(fold(b.records)).counters.llm_calls - 1
        assert resumed_state(d) == want
