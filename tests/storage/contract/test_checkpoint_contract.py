"""One contract for every checkpoint and attachment store (journald/storage/checkpoint_base.py):
memory, file and JetStream.

Two fixtures drive the same protocol. ``runs`` opens each backend of the registry as the
daemon does (records plus the stores beside them: a file store never creates a run directory
for a checkpoint, so its runs are created through the record store; a restart is a second
open). ``pair`` opens bare store pairs for the protocol's edge cases across many runs: the
JetStream pair binds the buckets of a fresh stream on this session's shared nats-server
through the daemon's binding; the file pair is the ``--checkpoint-dir`` layout (a co-located
store forgets nothing on ``drop_run``: the run's directory goes with the run, which the
``runs`` tests and the file backend's Delete tests cover).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from journald.core.checkpoints import Checkpoint
from journald.core.errors import (
    AttachmentNotFound,
    CheckpointNotFound,
    InvalidCheckpointId,
    InvalidDigest,
)
from journald.core.records import sha256_hex
from journald.storage import registry
from journald.storage.checkpoint_base import (
    OWNER,
    SNAPSHOT,
    AttachmentStore,
    CheckpointStore,
    make_checkpoint,
    new_id,
    seed_ids,
)
from journald.storage.file.checkpoint_store import FileAttachmentStore, FileCheckpointStore
from journald.storage.memory import MemoryAttachmentStore, MemoryCheckpointStore
from journald.storage.registry import OpenedBackend
from tests.builders import TS, JournalBuilder, text
from tests.storage.conftest import backend_params, factory

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


async def test_the_newest_id_is_the_highest_of_every_run_and_seeds_later_ids(
    runs: OpenedBackend,
) -> None:
    cps = runs.checkpoints
    assert await cps.newest_id() is None
    older, newest, marked = checkpoint(), checkpoint(OTHER), checkpoint()
    for cp in (newest, older, marked):
        await cps.put(cp)
    await cps.save_mark(RUN, {"seq": 1, "hash": "a" * 64})  # marks are not checkpoints
    assert await cps.newest_id() == max(
        older.checkpoint_id, newest.checkpoint_id, marked.checkpoint_id
    )
    ahead = str(ULID.from_timestamp(time.time() + 5))  # made by a clock running ahead
    seed_ids(ahead)
    assert new_id() > ahead


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


async def test_the_marks_and_the_snapshot_are_kept_apart_and_dropped_with_the_run(
    runs: OpenedBackend,
) -> None:
    cps = runs.checkpoints
    await cps.save_mark(RUN, {"marks": [1]})
    await cps.save_mark(RUN, {"snapshot": {"big": "x" * 100_000}}, SNAPSHOT)
    assert await cps.load_mark(RUN) == {"marks": [1]}
    assert await cps.load_mark(RUN, SNAPSHOT) == {"snapshot": {"big": "x" * 100_000}}
    assert await cps.list(RUN) == []  # neither part is a checkpoint
    assert await runs.records.delete(RUN)
    await cps.drop_run(RUN)
    assert await cps.load_mark(RUN) is None
    assert await cps.load_mark(RUN, SNAPSHOT) is None


async def test_the_owner_part_is_kept_beside_the_marks_outside_the_records_and_goes_with_the_run(
    runs: OpenedBackend,
) -> None:
    before = [r.raw for r in await runs.records.load(RUN)]
    cps = runs.checkpoints
    await cps.save_mark(RUN, {"marks": [1]})
    await cps.save_mark(RUN, {"uid": 65534}, OWNER)
    assert await cps.load_mark(RUN, OWNER) == {"uid": 65534}
    assert await cps.load_mark(RUN) == {"marks": [1]}
    assert await cps.load_mark(OTHER, OWNER) is None
    assert await cps.list(RUN) == []
    assert [r.raw for r in await runs.records.load(RUN)] == before  # records untouched
    assert await runs.records.delete(RUN)
    await cps.drop_run(RUN)
    assert await cps.load_mark(RUN, OWNER) is None


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


@pytest.mark.parametrize(
    "name", backend_params(n for n in registry.names() if registry.backend(n).durable)
)
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


# --- protocol edge cases on bare store pairs ---------------------------------------------

Pair = tuple[CheckpointStore, AttachmentStore]
Closer = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


async def memory_pair(tmp_path: Path) -> tuple[Pair, Closer]:
    return (MemoryCheckpointStore(), MemoryAttachmentStore()), _nothing


async def file_pair(tmp_path: Path) -> tuple[Pair, Closer]:
    cps = FileCheckpointStore.separate(str(tmp_path / "checkpoints"))
    return (cps, FileAttachmentStore.separate(str(tmp_path / "attachments"))), _nothing


async def jetstream_pair(tmp_path: Path) -> tuple[Pair, Closer]:
    from journald.storage.jetstream.checkpoint_store import bind_run_stores
    from journald.storage.jetstream.config import Cli
    from journald.storage.jetstream.store import JetStreamStore
    from tests.storage.backend_jetstream import fresh_stream

    url, name, _ = await fresh_stream()
    store = await JetStreamStore.connect(url, name, ack_timeout_s=2.0)
    cps, blobs = await bind_run_stores(store, Cli(url))
    assert cps is not None
    assert blobs is not None
    return (cps, blobs), store.close


FACTORIES: dict[str, Callable[[Path], Awaitable[tuple[Pair, Closer]]]] = {
    "memory": memory_pair,
    "file": file_pair,
    "jetstream": jetstream_pair,
}


@pytest.fixture(params=backend_params(sorted(FACTORIES)))
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    stores, close = await FACTORIES[request.param](tmp_path)
    try:
        yield stores
    finally:
        await close()


def conversation(words: str, turns: int = 2) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": [{"type": "text", "text": f"{words} {i} ✓"}]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"re {i}"}]})
    return out


def checkpoint_of(run_id: str, label: str = "", turns: int = 2) -> Checkpoint:
    return make_checkpoint(
        run_id=run_id,
        trigger="manual",
        label=label,
        seq=turns * 2,
        messages=conversation(label or run_id, turns),
        created="2026-12-01T12:00:00Z",
        model="m-1",
        cwd="/w",
    )


async def test_a_stored_checkpoint_reads_back_equal(pair: Pair) -> None:
    cps, _ = pair
    cp = checkpoint_of("run-a", "first")
    await cps.put(cp)
    got = await cps.get("run-a", cp.checkpoint_id)
    assert got.meta == cp.meta
    assert got.messages == cp.messages
    assert got.provenance == cp.provenance


async def test_a_conversation_larger_than_one_nats_message_round_trips(pair: Pair) -> None:
    cps, _ = pair
    big = "x" * 4096
    cp = checkpoint_of("run-big", big, turns=400)  # about 3 MiB of messages
    await cps.put(cp)
    assert (await cps.get("run-big", cp.checkpoint_id)).messages == cp.messages


async def test_listing_gives_one_runs_checkpoints_oldest_first(pair: Pair) -> None:
    cps, _ = pair
    made = [checkpoint_of("run-l", f"n{i}") for i in range(3)]
    await cps.put(checkpoint_of("run-other"))
    for cp in reversed(made):
        await cps.put(cp)
    assert await cps.list("run-l") == [cp.meta for cp in made]
    assert await cps.list("run-none") == []


async def test_putting_the_same_checkpoint_again_changes_nothing(pair: Pair) -> None:
    cps, _ = pair
    cp = checkpoint_of("run-i")
    await cps.put(cp)
    await cps.put(cp)
    assert await cps.list("run-i") == [cp.meta]


async def test_a_deleted_checkpoint_is_gone_and_a_second_delete_says_so(pair: Pair) -> None:
    cps, _ = pair
    keep, drop = checkpoint_of("run-d", "keep"), checkpoint_of("run-d", "drop")
    await cps.put(keep)
    await cps.put(drop)
    assert await cps.delete("run-d", drop.checkpoint_id) is True
    assert await cps.delete("run-d", drop.checkpoint_id) is False
    with pytest.raises(CheckpointNotFound):
        await cps.get("run-d", drop.checkpoint_id)
    assert await cps.list("run-d") == [keep.meta]


async def test_a_checkpoint_the_run_does_not_hold_is_not_found(pair: Pair) -> None:
    cps, _ = pair
    other = checkpoint_of("run-n")
    await cps.put(other)
    with pytest.raises(CheckpointNotFound):
        await cps.get("run-m", new_id())
    with pytest.raises(CheckpointNotFound):
        await cps.get("run-m", other.checkpoint_id)


async def test_the_owner_of_a_checkpoint_is_found_across_runs(pair: Pair) -> None:
    cps, _ = pair
    a, b = checkpoint_of("run-o1"), checkpoint_of("run-o2")
    await cps.put(a)
    await cps.put(b)
    assert await cps.owner(b.checkpoint_id) == "run-o2"
    assert await cps.owner(a.checkpoint_id) == "run-o1"
    assert await cps.owner(new_id()) is None


async def test_a_fold_mark_is_kept_replaced_and_may_be_several_megabytes(pair: Pair) -> None:
    cps, _ = pair
    assert await cps.load_mark("run-k") is None
    await cps.save_mark("run-k", {"seq": 3, "hash": "h3"})
    assert await cps.load_mark("run-k") == {"seq": 3, "hash": "h3"}
    snapshot = {"seq": 9, "hash": "h9", "state": ["é" * 1000] * 3000}  # about 6 MB of JSON
    await cps.save_mark("run-k", snapshot)
    assert await cps.load_mark("run-k") == snapshot
    assert await cps.load_mark("run-other") is None


async def test_dropping_a_run_forgets_its_checkpoints_and_mark_and_nothing_else(
    pair: Pair,
) -> None:
    cps, _ = pair
    gone, kept = checkpoint_of("run-x"), checkpoint_of("run-y")
    await cps.put(gone)
    await cps.put(kept)
    await cps.save_mark("run-x", {"seq": 1})
    await cps.drop_run("run-x")
    assert await cps.list("run-x") == []
    assert await cps.owner(gone.checkpoint_id) is None
    assert await cps.load_mark("run-x") is None
    assert await cps.list("run-y") == [kept.meta]


async def test_an_attachment_is_stored_once_per_run_and_reads_back_byte_identical(
    pair: Pair,
) -> None:
    _, blobs = pair
    data = os.urandom(300 * 1024)  # several Object Store chunks
    digest, existed = await blobs.put("run-a", data)
    assert (digest, existed) == (sha256_hex(data), False)
    assert await blobs.put("run-a", data) == (digest, True)
    assert await blobs.put("run-b", data) == (digest, False)  # per run
    assert await blobs.get("run-a", digest) == data
    assert await blobs.get("run-b", digest) == data


async def test_an_empty_attachment_round_trips(pair: Pair) -> None:
    _, blobs = pair
    digest, existed = await blobs.put("run-e", b"")
    assert not existed
    assert await blobs.get("run-e", digest) == b""


async def test_a_missing_or_malformed_attachment_address_is_refused_by_kind(
    pair: Pair,
) -> None:
    _, blobs = pair
    digest, _ = await blobs.put("run-a", b"bytes of run a")
    with pytest.raises(AttachmentNotFound):
        await blobs.get("run-other", digest)
    with pytest.raises(AttachmentNotFound):
        await blobs.get("run-a", sha256_hex(b"never uploaded"))
    with pytest.raises(InvalidDigest):
        await blobs.get("run-a", "ABC")


async def test_dropping_a_run_forgets_its_attachments_and_nothing_else(pair: Pair) -> None:
    _, blobs = pair
    gone, _ = await blobs.put("run-x", b"of x")
    kept, _ = await blobs.put("run-y", b"of y")
    await blobs.drop_run("run-x")
    with pytest.raises(AttachmentNotFound):
        await blobs.get("run-x", gone)
    assert await blobs.get("run-y", kept) == b"of y"
    assert await blobs.put("run-x", b"of x") == (gone, False)
