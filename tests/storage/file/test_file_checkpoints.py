"""File checkpoint stores beside a run: a write racing the run's delete never brings the
run's directory back (a directory without a journal would list as a damaged run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from journald.core.errors import SessionNotFound
from journald.storage.checkpoint_base import make_checkpoint
from journald.storage.file.checkpoint_store import FileAttachmentStore, FileCheckpointStore
from tests.builders import TS, text

RUN = "deleted-meanwhile"


async def test_a_write_after_the_run_check_but_after_the_delete_creates_no_run_directory(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "sessions"
    (sessions / "alive").mkdir(parents=True)
    run_dir = sessions / RUN

    # The interleaving of a delete with a write: the run's directory is seen as it stood
    # before the delete (``alive``), the write then goes where the run was.
    def dir_of(kind: str) -> str:
        return str(run_dir / kind)

    def seen_alive(run: str) -> str:
        return str(sessions / "alive")

    checkpoints = FileCheckpointStore(lambda run: dir_of("checkpoints"), run_dir_of=seen_alive)
    attachments = FileAttachmentStore(lambda run: dir_of("attachments"), run_dir_of=seen_alive)
    cp = make_checkpoint(
        run_id=RUN,
        trigger="manual",
        label="",
        seq=1,
        messages=[{"role": "user", "content": [text("hi")]}],
        created=TS,
        model="m",
        cwd="",
    )
    with pytest.raises(SessionNotFound, match="journald ls"):
        await checkpoints.put(cp)
    with pytest.raises(SessionNotFound):
        await attachments.put(RUN, b"bytes")
    await checkpoints.save_mark(RUN, {"seq": 1})  # a cache: dropped with its run, silently
    assert not run_dir.exists()
