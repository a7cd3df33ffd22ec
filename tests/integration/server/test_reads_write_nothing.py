"""Reads never write: every read RPC on idle runs leaves the data directory exactly as it was
(same files, inodes, sizes and modification times), the History paging index included.

One run was written through the daemon (its lease saved History's fold marks when it
ended), one with the file store alone (the daemon never indexed it: History folds it, and
still writes nothing).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, assistant_payload, text, user_payload
from tests.daemon import Daemon
from tests.integration.rpc import Lease, stub

Snapshot = dict[str, tuple[int, int, int]]


def snapshot(root: Path) -> Snapshot:
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
            )
    return out


def write_with_the_store(data: Path, run_id: str) -> None:
    b = JournalBuilder(run_id, prompt="written without the daemon")
    for i in range(12):
        b.add("assistant", assistant_payload([text(f"a{i}")], i + 1))
        b.add("user", user_payload(f"u{i}"))

    async def go() -> None:
        store = FileStore(data, segment_max_records=7)
        journal = await store.create(b.records[0])
        await journal.append(b.records[1:])
        await journal.close()

    asyncio.run(go())


def write_through_the_daemon(s: pbg.JournalServiceStub, run_id: str) -> None:
    lease = Lease(s, run_id)
    for _ in range(6):
        lease.append(lease.assistant())
    # Release returns once the lease's end is saved (fold marks, listing, journal closed)
    assert s.Release(pb.ReleaseRequest(run_id=run_id, lease_id=lease.lease.lease_id)).released
    lease.close()


def reads(s: pbg.JournalServiceStub, run_id: str) -> None:
    for offset, limit in ((0, 0), (0, 3), (5, 4), (1 << 20, 2)):
        s.History(pb.HistoryRequest(run_id=run_id, offset=offset, limit=limit))
    list(s.Load(pb.LoadRequest(run_id=run_id)))
    list(s.Load(pb.LoadRequest(run_id=run_id, from_seq=9)))
    s.Fold(pb.FoldRequest(run_id=run_id, governed=True))
    s.Verify(pb.VerifyRequest(run_id=run_id))
    s.List(pb.ListRequest())
    s.ListCheckpoints(pb.ListCheckpointsRequest(run_id=run_id))


def test_read_rpcs_on_idle_runs_change_nothing_in_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_with_the_store(data, "by-store")
    with Daemon(tmp_path, "file", "--segment-max-records", "7", data_dir=data) as d:
        s = stub(d.target)
        write_through_the_daemon(s, "by-daemon")
        assert (data / "sessions" / "by-daemon" / "checkpoints" / "fold-mark.json").exists()
        before = snapshot(data)
        for _ in range(2):  # a second round reads what the first one might have left
            for run_id in ("by-store", "by-daemon"):
                reads(s, run_id)
        after = snapshot(data)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert not changed, f"reads wrote: {sorted(changed)}"
