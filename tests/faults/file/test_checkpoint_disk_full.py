"""A checkpoint, attachment or fold-mark write that fails is a typed error, never "a bug":
a full disk is ``storage_full``, any other I/O error ``backend_unavailable``; nothing half
written is left behind and the same write succeeds once the disk is fixed."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core.errors import StorageFull
from journald.storage.checkpoint_base import make_checkpoint
from journald.storage.file.checkpoint_store import FileAttachmentStore, FileCheckpointStore
from tests.builders import TS, text
from tests.daemon import Daemon
from tests.faults.file.test_file_disk_full import fill, small_disk
from tests.integration.rpc import Lease, error_of, stub

__all__ = ["small_disk"]  # the tmpfs fixture, shared with the journal's disk-full test
RUN = "cp-full"


def test_a_checkpoint_write_failing_with_eio_is_backend_unavailable(tmp_path: Path) -> None:
    env = {"JOURNALD_FAILPOINTS": "cp_after_temp_write=raise:EIO"}
    with Daemon(tmp_path, "file", env=env) as d:
        s = stub(d.target)
        lease = Lease(s, RUN)
        with pytest.raises(grpc.RpcError) as info:
            s.Checkpoint(pb.CheckpointRequest(run_id=RUN))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        err = error_of(info.value)
        assert err.code == "backend_unavailable", err
        assert err.metadata["errno"] == "EIO"
        assert "bug" not in err.message
        assert "retry the checkpoint" in err.message
        assert not s.ListCheckpoints(pb.ListCheckpointsRequest(run_id=RUN)).checkpoints
        cp_dir = d.data_dir / "sessions" / RUN / "checkpoints"
        assert not any(cp_dir.iterdir())  # the temp file went with the failure
        lease.close()


async def test_a_full_disk_refuses_checkpoints_attachments_and_fold_marks_with_storage_full(
    small_disk: tuple[Path, str],
) -> None:
    disk, injected = small_disk
    if injected:
        pytest.skip(f"needs a real full file system: {injected}")
    sessions = disk / "sessions"
    (sessions / RUN).mkdir(parents=True)
    checkpoints = FileCheckpointStore.colocated_with(str(sessions))
    attachments = FileAttachmentStore.colocated_with(str(sessions))
    messages = [{"role": "user", "content": [text("x" * 20_000)]}]
    cp = make_checkpoint(
        run_id=RUN,
        trigger="manual",
        label="",
        seq=1,
        messages=messages,
        created=TS,
        model="m",
        cwd="",
    )
    blob = os.urandom(20_000)
    mark = {
        "marks": [
            {"seq": 1, "hash": "0" * 64, "messages": 1, "last_role": "user", "pad": "p" * 20_000}
        ]
    }
    filler = disk / "filler"
    assert fill(filler) > 0
    for write in (
        lambda: checkpoints.put(cp),
        lambda: attachments.put(RUN, blob),
        lambda: checkpoints.save_mark(RUN, mark),
    ):
        with pytest.raises(StorageFull) as info:
            await write()
        assert info.value.metadata["errno"] == "ENOSPC"
        assert "Free space" in info.value.message
    assert await checkpoints.list(RUN) == []
    leftovers = [p.name for p in (sessions / RUN).rglob("*") if p.is_file()]
    assert leftovers == [], leftovers
    filler.unlink()
    await checkpoints.put(cp)
    assert (await attachments.put(RUN, blob))[1] is False
    await checkpoints.save_mark(RUN, mark)
    assert [m.checkpoint_id for m in await checkpoints.list(RUN)] == [cp.checkpoint_id]
    assert await attachments.get(RUN, (await attachments.put(RUN, blob))[0]) == blob
    assert await checkpoints.load_mark(RUN) == mark
