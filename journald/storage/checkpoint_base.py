"""What a checkpoint store and an attachment store are, and how checkpoints get their ids.

Every backend opens one of each (``journald.storage.registry``): ``memory``,
``file.checkpoint_store``, or a backend's own. The model and the stored byte form are pure
(``journald.core.checkpoints``); a store keeps ``encode_file`` bytes per checkpoint, or the
objects themselves when it lives in memory.

Ids are ULIDs minted here (``new_id``), strictly increasing within the process and, once the
daemon has seeded the generator with the newest id its store holds (``seed_ids``), above
every id already stored: listing a run's checkpoints by id lists them in creation order even
after the clock was stepped back (a ULID's time part is only where an id starts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ulid import ULID

from journald.clock import wall_ms
from journald.core.checkpoints import (
    Checkpoint,
    CheckpointMeta,
    Exported,
    Message,
    content_hash,
    governed,
)
from journald.core.fold import fold

MARKS = "marks"
SNAPSHOT = "snapshot"
SCRUB = "scrub"
"""The damage the background scrubber found in the run (journald.server.scrub)."""
OWNER = "owner"
VIEWS = "views"
"""The page index of the cleaned-up and governed History views (journald.storage.view_pages)."""
MARK_PARTS = (MARKS, SNAPSHOT, SCRUB, OWNER, VIEWS)
"""The parts of a run's index a checkpoint store keeps (``save_mark``). ``owner`` is not a
cache: the uid that created the run on a shared daemon (``journald.server.owners``)."""


class CheckpointStore(Protocol):
    """Where checkpoints live. Every method may raise ``SessionNotFound`` for a missing run
    directory (file) and ``StoreCorrupted`` for a damaged checkpoint."""

    async def put(self, cp: Checkpoint) -> None: ...

    async def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """``CheckpointNotFound`` if the run has no such checkpoint."""
        ...

    async def list(self, run_id: str) -> list[CheckpointMeta]:
        """Ordered by id (oldest first)."""
        ...

    async def delete(self, run_id: str, checkpoint_id: str) -> bool: ...

    async def owner(self, checkpoint_id: str) -> str | None:
        """The run holding ``checkpoint_id``, if any (for ``session_mismatch``)."""
        ...

    async def drop_run(self, run_id: str) -> None:
        """Forget every checkpoint of a deleted run (no-op when co-located with it)."""
        ...

    async def save_mark(self, run_id: str, mark: dict[str, Any], part: str = MARKS) -> None:
        """Keep one part of the run's index (``MARK_PARTS``): its fold marks
        (``journald.core.paging.FoldMark`` + the record hash at each seq), which let History
        serve pages from the run's tail, its fold snapshot, which lets Open fold only the
        tail, or the damage the scrubber found. Kept apart so a History page never reads the
        snapshot. A cache, never truth."""
        ...

    async def load_mark(self, run_id: str, part: str = MARKS) -> dict[str, Any] | None: ...

    async def newest_id(self) -> str | None:
        """The highest checkpoint id the store holds in any run (``seed_ids``)."""
        ...


class AttachmentStore(Protocol):
    """Binary tool outputs, stored once per run, addressed by the SHA-256 of their bytes.
    Attachments are never deleted on their own: they go with their run, so every checkpoint
    of the run keeps what it references."""

    async def put(self, run_id: str, data: bytes) -> tuple[str, bool]:
        """Store ``data``; (its sha256, whether the run already held it)."""
        ...

    async def get(self, run_id: str, digest: str) -> bytes:
        """The bytes (verified); ``AttachmentNotFound`` if the run does not hold them."""
        ...

    async def drop_run(self, run_id: str) -> None: ...


_ulid_lock = threading.Lock()
_last_ulid = 0


def new_id() -> str:
    """A ULID, strictly increasing within this process and above the seed (listing order =
    creation order, whatever the clock did)."""
    global _last_ulid
    with _ulid_lock:
        value = int(ULID.from_timestamp(wall_ms() / 1000))
        if value <= _last_ulid:
            value = _last_ulid + 1
        _last_ulid = value
        return str(ULID.from_int(value))


def seed_ids(newest: str | None) -> None:
    """Mint every later id above ``newest`` (the highest id already stored): a daemon
    restarted with its clock behind the one that made them still makes ids that sort after
    them, so ``--checkpoint-max`` evicts the oldest checkpoint, never the new one."""
    global _last_ulid
    if newest:
        with _ulid_lock:
            _last_ulid = max(_last_ulid, int(ULID.from_str(newest)))


def make_checkpoint(
    *,
    run_id: str,
    trigger: str,
    label: str,
    seq: int,
    messages: Sequence[Message],
    created: str,
    model: str,
    cwd: str,
) -> Checkpoint:
    msgs = governed(messages)
    meta = CheckpointMeta(
        new_id(), run_id, trigger, label, seq, len(msgs), created, model, content_hash(msgs), cwd
    )
    return Checkpoint(meta, msgs)


def imported(ex: Exported, *, run_id: str, seq: int, created: str) -> Checkpoint:
    """A new checkpoint owned by ``run_id`` holding a verified export's conversation."""
    meta = replace(
        ex.meta,
        checkpoint_id=new_id(),
        run_id=run_id,
        trigger="import",
        seq=seq,
        created=created,
    )
    return Checkpoint(
        meta,
        ex.messages,
        {"run_id": ex.meta.run_id, "checkpoint_id": ex.meta.checkpoint_id, "seq": ex.meta.seq},
    )


def pre_prune_hook(
    store: CheckpointStore, created: Callable[[], str]
) -> Callable[[str, Sequence[Any]], Any]:
    """The ``before`` callback of ``FileStore.prune``: a ``pre_prune`` checkpoint of what the
    prune drops, i.e. the conversation as it stood just before the run's latest rebase (its
    failure aborts the prune), and the run's fold snapshot dropped."""

    async def before(run_id: str, records: Sequence[Any]) -> None:
        cut = max(i for i, r in enumerate(records) if r.kind == "rebase")
        # a paged store reads the pages the kept history references (docs/design.md#prune)
        reader = getattr(store, "pages", None)
        resolve = await reader.for_records(run_id, records[:cut]) if reader else None
        st = fold(records[:cut], pages=resolve)
        # a paged rebase folds with its pages sealed: the checkpoint holds every message
        messages = await reader.whole(run_id, st.messages) if reader else list(st.messages)
        cp = make_checkpoint(
            run_id=run_id,
            trigger="pre_prune",
            label=f"before pruning seqs up to {st.last_seq}",
            seq=st.last_seq,
            messages=messages,
            created=created(),
            model=st.fingerprint.model if st.fingerprint else "",
            cwd="",
        )
        await store.put(cp)
        # The run's fold snapshot (docs/design.md#fold-snapshots) counts the records the
        # prune drops, yet the record it ends on stays: drop it, so the next Open folds the
        # pruned run in full. Its fold marks stay valid (a prune keeps the messages).
        if await store.load_mark(run_id, SNAPSHOT) is not None:
            await store.save_mark(run_id, {"snapshot": None}, SNAPSHOT)

    return before
