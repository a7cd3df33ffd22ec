"""Every OS error of the file backend is one of three typed errors (``file_errors.disk_error``):
each errno class, raised at the real call sites of a create, a listing, a delete, a
checkpoint write and a checkpoint listing (named failpoints), is ``storage_full``,
``backend_unavailable`` or ``store_corrupted``, never a raw ``OSError``, and changes nothing."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from journald import failpoints
from journald.core.errors import BackendUnavailable, StorageFull, StoreCorrupted
from journald.storage.checkpoint_base import make_checkpoint
from journald.storage.file.checkpoint_store import FileCheckpointStore
from journald.storage.file.store import FileStore
from tests.builders import TS, JournalBuilder, text, user_payload

CLASSES = {
    "ENOSPC": StorageFull,
    "EDQUOT": StorageFull,
    "EROFS": BackendUnavailable,
    "EACCES": BackendUnavailable,
    "EPERM": BackendUnavailable,
    "EIO": BackendUnavailable,
    "EUCLEAN": StoreCorrupted,
    "EBADMSG": StoreCorrupted,
}


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    failpoints.disarm()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def stored_run(tmp_path: Path) -> tuple[FileStore, FileCheckpointStore]:
    store = FileStore(tmp_path / "data")
    journal = await store.create(JournalBuilder("kept").records[0])
    await journal.close()
    return store, FileCheckpointStore.colocated_with(store.sessions_dir)


def checkpoint() -> object:
    messages = [{"role": "user", "content": [text("x")]}]
    return make_checkpoint(
        run_id="kept", trigger="manual", label="", seq=1, messages=messages, created=TS,
        model="m", cwd="",
    )  # fmt: skip


OPS: dict[str, tuple[str, Callable[[FileStore, FileCheckpointStore], Awaitable[object]]]] = {
    "create": ("before_run_create", lambda s, c: s.create(JournalBuilder("new").records[0])),
    "list": ("before_run_list", lambda s, c: s.list()),
    "delete": ("before_run_delete", lambda s, c: s.delete("kept")),
    "checkpoint": ("cp_before_write", lambda s, c: c.put(checkpoint())),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("op", sorted(OPS))
async def test_each_errno_class_is_a_typed_error_and_changes_nothing(
    tmp_path: Path, op: str, name: str
) -> None:
    store, checkpoints = await stored_run(tmp_path)
    before = tree(tmp_path / "data")
    point, call = OPS[op]
    failpoints.arm(f"{point}=raise:{name}")
    with pytest.raises(CLASSES[name]) as refused:
        await call(store, checkpoints)
    err = refused.value
    assert isinstance(err.__cause__, OSError)
    assert err.__cause__.errno == getattr(errno, name)
    assert err.metadata["errno"] == name
    assert "bug" not in err.message
    failpoints.disarm()
    after = tree(tmp_path / "data")
    after.pop("sessions/kept/journal.lock", None)  # the delete took the run's lock
    before.pop("sessions/kept/journal.lock", None)
    assert after == before
    assert [i.run_id for i in await store.list()] == ["kept"]
    await store.close()


async def test_a_file_that_is_not_the_kind_it_must_be_is_store_corrupted(tmp_path: Path) -> None:
    store, _ = await stored_run(tmp_path)
    journal = tmp_path / "data" / "sessions" / "kept" / "journal.jsonl"
    journal.unlink()
    journal.mkdir()  # EISDIR where the journal belongs
    with pytest.raises(StoreCorrupted, match="EISDIR"):
        await store.open("kept")
    assert journal.is_dir()
    await store.close()


async def test_a_run_deleted_under_its_open_journal_acknowledges_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "data")
    b = JournalBuilder("gone")
    b.add("user", user_payload("after the delete"))
    journal = await store.create(b.records[0])
    shutil.rmtree(tmp_path / "data" / "sessions" / "gone")  # by hand, under the lease
    with pytest.raises(BackendUnavailable, match="was deleted while the run was open"):
        await journal.append(b.records[1:])
    assert journal.last_seq == 1
    await journal.close()
    await store.close()
