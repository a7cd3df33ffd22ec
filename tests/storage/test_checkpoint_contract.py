"""The checkpoint and attachment store contract (journald/storage/checkpoint_base.py), once
per backend of the registry, on the stores the backend opens beside its records.

Only the protocols are used: a run is created through the record store (a file store never
creates a run directory for a checkpoint), deleted through it plus ``drop_run`` as the
daemon does, and a restart is a second ``open`` of the backend over the same data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journald.core.checkpoints import Checkpoint
from journald.core.errors import (
    AttachmentNotFound,
    CheckpointNotFound,
    InvalidCheckpointId,
    InvalidDigest,
)
from journald.core.records import sha256_hex
from journald.storage import registry
from journald.storage.checkpoint_base import make_checkpoint, new_id
from journald.storage.registry import OpenedBackend
from tests.builders import TS, JournalBuilder, text
from tests.storage.conftest import factory

RUN = "cp-run"
OTHER = "cp-other"


async def new_run(opened: OpenedBackend, run_id: str = RUN) -> None:
    journal = await opened.records.create(JournalBuilder(run_id).records[0])
    await journal.close()


@pytest.fixture
async def runs(opened_backend: OpenedBackend) -> OpenedBackend:
    """The backend with two runs, ``RUN`` and ``OTHER``."""
    await new_run(opened_backend)
    await new_run(opened_backend, OTHER)
    return opened_backend


def checkpoint(run_id: str = RUN, words: str = "hello", seq: int = 1) -> Checkpoint:
    return make_checkpoint(
        run_id=run_id,
        trigger="manual",
        label=words,
        seq=seq,
        messages=[{"role": "user", "content": [text(words)]}],
        created=TS,
        model="m",
        cwd="/w",
    )


async def test_a_stored_checkpoint_reads_back_equal_and_lists_in_creation_order(
    runs: OpenedBackend,
) -> None:
    cps = runs.checkpoints
    first, second, elsewhere = checkpoint(), checkpoint(words="later"), checkpoint(OTHER)
    for cp in (second, elsewhere, first):  # stored out of order; listed by id
        await cps.put(cp)
    assert await cps.get(RUN, first.checkpoint_id) == first
    assert await cps.list(RUN) == [first.meta, second.meta]
    assert await cps.owner(elsewhere.checkpoint_id) == OTHER
    assert await cps.owner(new_id()) is None


async def test_a_checkpoint_of_another_run_or_a_bad_id_is_not_found(runs: OpenedBackend) -> None:
    cp = checkpoint(OTHER)
    await runs.checkpoints.put(cp)
    with pytest.raises(CheckpointNotFound, match=f"journald checkpoints {RUN}"):
        await runs.checkpoints.get(RUN, cp.checkpoint_id)
    with pytest.raises((InvalidCheckpointId, CheckpointNotFound)):
        await runs.checkpoints.get(RUN, "../../etc/passwd")


async def test_delete_removes_one_checkpoint_once(runs: OpenedBackend) -> None:
    cps = runs.checkpoints
    kept, gone = checkpoint(), checkpoint(words="bye")
    await cps.put(kept)
    await cps.put(gone)
    assert await cps.delete(RUN, gone.checkpoint_id) is True
    assert await cps.delete(RUN, gone.checkpoint_id) is False
    assert await cps.list(RUN) == [kept.meta]


async def test_a_fold_mark_is_kept_per_run_and_replaced_by_the_next(runs: OpenedBackend) -> None:
    cps = runs.checkpoints
    assert await cps.load_mark(RUN) is None
    await cps.save_mark(RUN, {"seq": 3, "hash": "a" * 64})
    await cps.save_mark(RUN, {"seq": 5, "hash": "b" * 64})
    assert await cps.load_mark(RUN) == {"seq": 5, "hash": "b" * 64}
    assert await cps.load_mark(OTHER) is None


async def test_attachments_are_stored_once_per_run_by_their_sha256(runs: OpenedBackend) -> None:
    blobs = runs.attachments
    data = os.urandom(3000)
    assert await blobs.put(RUN, data) == (sha256_hex(data), False)
    assert await blobs.put(RUN, data) == (sha256_hex(data), True)
    assert await blobs.get(RUN, sha256_hex(data)) == data
    with pytest.raises(AttachmentNotFound, match="PutAttachment"):
        await blobs.get(OTHER, sha256_hex(data))
    with pytest.raises(InvalidDigest):
        await blobs.get(RUN, "../" + "a" * 61)


async def test_a_deleted_run_leaves_no_checkpoint_mark_or_attachment(runs: OpenedBackend) -> None:
    cp = checkpoint()
    await runs.checkpoints.put(cp)
    await runs.checkpoints.save_mark(RUN, {"seq": 1})
    digest, _ = await runs.attachments.put(RUN, b"bytes")
    assert await runs.records.delete(RUN)  # what DeleteRun does, in its order
    await runs.checkpoints.drop_run(RUN)
    await runs.attachments.drop_run(RUN)
    assert await runs.checkpoints.list(RUN) == []
    assert await runs.checkpoints.owner(cp.checkpoint_id) is None
    assert await runs.checkpoints.load_mark(RUN) is None
    with pytest.raises(AttachmentNotFound):
        await runs.attachments.get(RUN, digest)


@pytest.mark.parametrize("name", [n for n in registry.names() if registry.backend(n).durable])
async def test_checkpoints_marks_and_attachments_outlive_a_restart(
    name: str, tmp_path: Path
) -> None:
    opened = await factory(name).open(tmp_path)
    await new_run(opened)
    cp = checkpoint()
    await opened.checkpoints.put(cp)
    await opened.checkpoints.save_mark(RUN, {"seq": 1})
    digest, _ = await opened.attachments.put(RUN, b"kept bytes")
    await opened.close()
    again = await factory(name).open(tmp_path)
    try:
        assert await again.checkpoints.get(RUN, cp.checkpoint_id) == cp
        assert await again.checkpoints.load_mark(RUN) == {"seq": 1}
        assert await again.attachments.get(RUN, digest) == b"kept bytes"
    finally:
        await again.close()
