"""Checkpoint, compaction, restore, fork, export/import and history RPCs
(docs/design.md#checkpoints).

Serialization: every operation that reads the head of a run for a write or a checkpoint
takes the run's lease lock, so it is ordered with the holder's appends:

* a lease is held: the operation runs under ``lease.lock`` on the cached folded state, and a
  rebase goes through the held lease's journal (``JournalService.commit``: admission, write,
  fold into the cached state, publish to tails). Compact and Restore append to a held run
  only for its holder (``lease_id``); anyone else gets ``locked`` naming the holder;
* no lease is held and the operation writes (Compact, Restore, and Fork's new run): the
  daemon takes the lease itself for the operation (a concurrent ``Open`` gets ``locked``
  naming the daemon), then releases it;
* no lease is held and the operation only reads (Checkpoint, Fork of the head, History,
  Export): it folds the stored records; a checkpoint is a snapshot at the seq it names.

Idle only: Checkpoint, Compact, Restore and Fork of the head are refused with
``turn_running`` while the run has a pending turn with unanswered tool calls (Compact
answers ``REJECTED``/``turn_running``; the others fail with the error).

Everything handed back as a conversation (checkpoints, rebases of restore/fork/compaction,
History pages) is the governed, paired view (``journald.core.governance.sanitize``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from journald_client.pb import journal_pb2 as pb

from journald.checkpoints import (
    MAX_ATTACHMENT_BYTES,
    AttachmentStore,
    Checkpoint,
    CheckpointMeta,
    CheckpointStore,
    attachment_block,
    attachment_refs,
    export_bytes,
    failpoint,
    governed,
    imported,
    make_checkpoint,
    new_id,
    valid_checkpoint_id,
    valid_sha256,
    verify_export,
)
from journald.clock import utc_ts
from journald.core import governance
from journald.core.errors import (
    CheckpointNotFound,
    InvalidRecord,
    InvalidRequest,
    JournaldError,
    LeaseLost,
    SessionExists,
    SessionMismatch,
    SessionNotFound,
    StoreCorrupted,
    TurnRunning,
)
from journald.core.fold import Message, Pending, RunState, StateValue, fold_into
from journald.core.paging import (
    FoldMark,
    Page,
    Window,
    fold_window,
    page,
    page_window,
    tail_start,
)
from journald.core.records import (
    GENESIS,
    Record,
    canonical_json,
    make_record,
    sha256_hex,
    validate_id,
)
from journald.server.convert import message_from_pb, messages_to_pb, pending_to_pb, state_to_pb
from journald.server.edge import unary
from journald.server.leases import Lease, LeaseTable, WatchHub, new_holder
from journald.server.window import ASK_FOR_SMALLER_PAGE, check_fits
from journald.storage.base import AppendResult, Store
from journald.validation import validate_payload

if TYPE_CHECKING:
    from journald.server.service import Limits

Ctx = grpc.aio.ServicerContext[Any, Any]
DAEMON_HOLDER = "journald daemon"
HISTORY_CACHE_RUNS = 8  # dormant runs whose governed conversation History keeps
_FOLD_REFUSALS: OrderedDict[tuple[str, str], None] = OrderedDict()  # logged at ERROR once
log = logging.getLogger(__name__)
MARK_EVERY = 1000  # records between the fold marks History pages from
MARKS_KEPT = 256  # per run (the newest); older pages fold from the oldest kept or in full
TRIGGER_PB = {
    "manual": pb.CHECKPOINT_TRIGGER_MANUAL,
    "pre_compaction": pb.CHECKPOINT_TRIGGER_PRE_COMPACTION,
    "pre_restore": pb.CHECKPOINT_TRIGGER_PRE_RESTORE,
    "pre_prune": pb.CHECKPOINT_TRIGGER_PRE_PRUNE,
    "import": pb.CHECKPOINT_TRIGGER_IMPORT,
}


def meta_to_pb(m: CheckpointMeta) -> pb.CheckpointMeta:
    return pb.CheckpointMeta(
        checkpoint_id=m.checkpoint_id,
        run_id=m.run_id,
        trigger=TRIGGER_PB.get(m.trigger, pb.CHECKPOINT_TRIGGER_UNSPECIFIED),
        label=m.label,
        seq=m.seq,
        message_count=m.message_count,
        created=m.created,
        model=m.model,
        hash=m.hash,
        cwd=m.cwd,
    )


def ack_of(r: AppendResult) -> pb.Ack:
    from journald.server.service import ack_pb

    return ack_pb(r)


def mark_of(st: RunState) -> dict[str, Any]:
    """A fold mark (``journald.core.paging.FoldMark``) of a state without an open turn, plus the
    hash of its last record (a mark is used only while that record is still at its seq)."""
    return {
        "seq": st.last_seq,
        "hash": st.last_hash,
        "messages": len(st.messages),
        "last_role": st.messages[-1]["role"] if st.messages else "",
    }


def naming_run(exc: StoreCorrupted, run_id: str) -> StoreCorrupted:
    """A fold's refusal of stored records (``journald.core.fold`` is pure: it knows no run) with
    the run named, as every other ``store_corrupted`` is; logged at ERROR the first time."""
    if exc.metadata.get("run_id") != run_id:
        exc.metadata["run_id"] = run_id
        exc.message = f"run {run_id}: {exc.message}"
    key = (run_id, exc.metadata.get("seq", ""))
    first = key not in _FOLD_REFUSALS
    _FOLD_REFUSALS[key] = None
    while len(_FOLD_REFUSALS) > 1024:
        _FOLD_REFUSALS.popitem(last=False)
    log.log(
        logging.ERROR if first else logging.DEBUG,
        "store_corrupted: run %s, seq %s: %s (the fold refuses the stored records; reads of "
        "the run fail until it is restored or recovered)",
        run_id,
        key[1],
        exc.message,
    )
    return exc


async def fold_stored(
    store: Store, run_id: str, marks: list[dict[str, Any]] | None = None
) -> RunState:
    """Fold a run's stored records; with ``marks``, collect a fold mark every
    ``MARK_EVERY`` records (where no turn is open) on the way."""
    state = RunState()
    async for rec in store.iter_records(run_id):
        try:
            fold_into(state, (rec,))
        except StoreCorrupted as exc:
            raise naming_run(exc, run_id) from None
        due = marks is not None and (not marks or state.last_seq - marks[-1]["seq"] >= MARK_EVERY)
        if marks is not None and due and state.pending is None:
            marks.append(mark_of(state))
    if state.last_seq == 0:
        raise SessionNotFound(f"run {run_id} has no records", metadata={"run_id": run_id})
    return state


def turn_running(state: RunState, what: str) -> TurnRunning:
    ids = [c.id for c in state.pending.unanswered] if state.pending else []
    return TurnRunning(
        f"run {state.run_id}: cannot {what} while tool calls {ids} of seq "
        f"{state.pending.seq if state.pending else 0} are unanswered; finish the turn (append a "
        "result for each, is_error if abandoned) and retry",
        metadata={"run_id": state.run_id},
    )


@dataclass(frozen=True, slots=True)
class Conversation:
    """What History pages: the governed messages, the seq they reflect, the open turn."""

    messages: list[Message]
    last_seq: int
    pending: Pending | None

    @classmethod
    def of(cls, state: RunState) -> Conversation:
        pending = state.pending.copy() if state.pending is not None else None
        return cls(governed(state.messages), state.last_seq, pending)


@dataclass(slots=True)
class Held:
    """The run's state for an operation, and the lease to append through (if writing)."""

    state: RunState
    lease: Lease | None
    cwd: str


def check_summary(summary: Sequence[Message]) -> None:
    if not summary:
        raise InvalidRecord(
            "field summary: a compaction needs at least one summary message",
            metadata={"field": "summary"},
        )
    validate_payload("rebase", {"reason": "compaction", "messages": list(summary)})
    if summary[0]["role"] != "user":
        raise InvalidRecord(
            "field summary[0].role: the summary must start with a user message (the "
            "compacted history is sent to a model, which needs a user turn first)",
            metadata={"field": "summary[0].role"},
        )
    for i, m in enumerate(summary):
        if not m["content"] or any(
            b.get("type") in ("tool_use", "tool_result") for b in m["content"]
        ):
            raise InvalidRecord(
                f"field summary[{i}].content: summary messages need content and hold no "
                "tool_use/tool_result blocks",
                metadata={"field": f"summary[{i}].content"},
            )


class CheckpointRpcs:
    store: Store
    leases: LeaseTable
    hub: WatchHub
    checkpoints: CheckpointStore
    checkpoint_max: int
    attachments: AttachmentStore
    limits: Limits

    if TYPE_CHECKING:

        async def commit(self, lease: Lease, records: list[Record]) -> list[AppendResult]: ...

        def _check(self, rec: Record) -> None: ...

        async def settled_state(self, lease: Lease, wait: bool = True) -> RunState: ...

    # --- serialization --------------------------------------------------------------------

    async def _require_run(self, run_id: str) -> None:
        if not await self.store.exists(run_id):
            raise SessionNotFound(
                f"run {run_id} does not exist; list runs with `journald ls`",
                metadata={"run_id": run_id},
            )

    @contextlib.asynccontextmanager
    async def _daemon_lease(
        self, run_id: str, create: Record | None = None
    ) -> AsyncIterator[Lease]:
        """Hold ``run_id`` as the daemon for one operation (``create``: make the run first)."""
        holder = new_holder(DAEMON_HOLDER, os.getpid(), socket.gethostname(), "")
        async with self.leases.opening_lock(run_id):
            self.leases.refuse_if_held(run_id)
            await self.leases.wait_closed(run_id)
            if create is not None:
                if await self.store.exists(run_id):
                    raise SessionExists(
                        f"run {run_id} already exists; fork into another id",
                        metadata={"run_id": run_id},
                    )
                journal = await self.store.create(create)
                state = fold_into(RunState(), (create,))
            else:
                await self._require_run(run_id)
                journal = await self.store.open(run_id)
                marks: list[dict[str, Any]] = []
                try:
                    state = await fold_stored(self.store, run_id, marks)
                except BaseException:
                    await journal.close()
                    raise
                self.index_on_close(run_id, marks)
            lease = self.leases.grant(run_id, holder, journal, state)
        try:
            async with lease.lock:
                yield lease
        finally:
            self.leases.release(lease)
            await self.leases.wait_closed(run_id)

    @contextlib.asynccontextmanager
    async def _head(self, run_id: str, lease_id: str, write: bool) -> AsyncIterator[Held]:
        """The run's head, serialized with its appends (see the module doc)."""
        lease = self.leases.held(run_id)
        if lease is None and lease_id:
            raise LeaseLost(
                f"no live lease {lease_id} on run {run_id}: the lease ended; Open the run "
                "again, or omit lease_id to let the daemon hold the run for the operation",
                metadata={"run_id": run_id},
            )
        if lease is not None:
            if write and lease.lease_id != lease_id:
                self.leases.refuse_if_held(run_id)  # raises locked naming the holder
            async with lease.lock:
                if lease.ended.is_set():
                    raise LeaseLost(
                        f"the lease on run {run_id} ended during the operation; retry",
                        metadata={"run_id": run_id},
                    )
                yield Held(await self.settled_state(lease), lease, lease.holder.cwd)
            return
        if write:
            async with self._daemon_lease(run_id) as own:
                yield Held(own.state, own, "")
            return
        await self._require_run(run_id)
        yield Held(await fold_stored(self.store, run_id), None, "")

    # --- checkpoints ----------------------------------------------------------------------

    def _event(self, kind: str, meta: CheckpointMeta) -> None:
        self.hub.publish_checkpoint(
            meta.run_id, pb.CheckpointEvent(kind=kind, checkpoint=meta_to_pb(meta))
        )

    async def _store_checkpoint(self, cp: Checkpoint) -> None:
        await self.checkpoints.put(cp)
        self._event("created", cp.meta)
        if self.checkpoint_max > 0:
            metas = await self.checkpoints.list(cp.meta.run_id)
            for old in metas[: max(0, len(metas) - self.checkpoint_max)]:
                if await self.checkpoints.delete(old.run_id, old.checkpoint_id):
                    self._event("evicted", old)

    async def _take(self, held: Held, trigger: str, label: str) -> Checkpoint:
        st = held.state
        cp = make_checkpoint(
            run_id=st.run_id,
            trigger=trigger,
            label=label,
            seq=st.last_seq,
            messages=st.messages,
            created=utc_ts(),
            model=st.fingerprint.model if st.fingerprint else "",
            cwd=held.cwd,
        )
        await self._store_checkpoint(cp)
        return cp

    async def _checkpoint_of(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        cid = valid_checkpoint_id(checkpoint_id)
        try:
            cp = await self.checkpoints.get(run_id, cid)
        except CheckpointNotFound:
            owner = await self.checkpoints.owner(cid)
            if owner is not None and owner != run_id:
                raise SessionMismatch(
                    f"checkpoint {cid} belongs to run {owner}, not {run_id}; restore it into "
                    f"{owner}, fork it, or export it and import it into {run_id}",
                    metadata={"run_id": run_id, "checkpoint_id": cid, "owner": owner},
                ) from None
            raise
        if cp.meta.run_id != run_id:
            raise SessionMismatch(
                f"checkpoint {cid} belongs to run {cp.meta.run_id}, not {run_id}",
                metadata={"run_id": run_id, "checkpoint_id": cid, "owner": cp.meta.run_id},
            )
        return cp

    def _rebase(
        self,
        lease: Lease,
        reason: str,
        messages: Sequence[Message],
        cp: Checkpoint | None,
        covered: tuple[int, int] | None,
    ) -> Record:
        payload: dict[str, Any] = {"reason": reason, "messages": list(messages)}
        if cp is not None:
            payload["checkpoint_id"] = cp.checkpoint_id
            payload["checkpoint_hash"] = cp.meta.hash
        if covered is not None:
            payload["covered"] = {"from_seq": covered[0], "to_seq": covered[1]}
        rec = make_record(
            lease.journal.last_seq + 1, "rebase", payload, lease.journal.last_hash, utc_ts()
        )
        self._check(rec)
        return rec

    @unary
    async def Checkpoint(
        self, request: pb.CheckpointRequest, context: Ctx
    ) -> pb.CheckpointResponse:
        run_id = validate_id(request.run_id)
        async with self._head(run_id, "", write=False) as held:
            if held.state.pending is not None:
                raise turn_running(held.state, "take a checkpoint")
            cp = await self._take(held, "manual", request.label)
        return pb.CheckpointResponse(checkpoint=meta_to_pb(cp.meta))

    @unary
    async def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: Ctx
    ) -> pb.ListCheckpointsResponse:
        run_id = validate_id(request.run_id)
        await self._require_run(run_id)
        metas = await self.checkpoints.list(run_id)
        return pb.ListCheckpointsResponse(checkpoints=[meta_to_pb(m) for m in metas])

    @unary
    async def DeleteCheckpoint(
        self, request: pb.DeleteCheckpointRequest, context: Ctx
    ) -> pb.DeleteCheckpointResponse:
        run_id = validate_id(request.run_id)
        cid = valid_checkpoint_id(request.checkpoint_id)
        try:
            cp = await self.checkpoints.get(run_id, cid)
        except (CheckpointNotFound, SessionNotFound):
            return pb.DeleteCheckpointResponse(deleted=False)
        deleted = await self.checkpoints.delete(run_id, cid)
        if deleted:
            self._event("deleted", cp.meta)
        return pb.DeleteCheckpointResponse(deleted=deleted)

    # --- restore / compact ----------------------------------------------------------------

    @unary
    async def Restore(self, request: pb.RestoreRequest, context: Ctx) -> pb.RestoreResponse:
        run_id = validate_id(request.run_id)
        await self._require_run(run_id)
        cp = await self._checkpoint_of(run_id, request.checkpoint_id)
        async with self._head(run_id, request.lease_id, write=True) as held:
            st = held.state
            assert held.lease is not None
            if st.pending is not None:
                raise turn_running(st, "restore a checkpoint")
            warnings = []
            if held.cwd and cp.meta.cwd and held.cwd != cp.meta.cwd:
                warnings.append(
                    pb.Warning(
                        code="cwd_mismatch",
                        message=f"checkpoint {cp.checkpoint_id} was taken in {cp.meta.cwd}, "
                        f"the current writer works in {held.cwd}; the conversation was "
                        "restored, the working directory was not changed (files the "
                        "conversation mentions may differ)",
                    )
                )
            before = len(st.messages)
            pre = None
            if not request.skip_checkpoint:
                pre = await self._take(held, "pre_restore", f"before restoring {cp.checkpoint_id}")
                failpoint("op_after_checkpoint")
            msgs = governed(cp.messages)
            rec = self._rebase(held.lease, "restore", msgs, cp, (1, st.last_seq))
            results = await self.commit(held.lease, [rec])
            failpoint("op_after_rebase")
            after = len(held.lease.state.messages)
        return pb.RestoreResponse(
            from_messages=before,
            to_messages=after,
            pre_restore_checkpoint_id=pre.checkpoint_id if pre else "",
            ack=ack_of(results[0]),
            warnings=warnings,
        )

    @unary
    async def Compact(self, request: pb.CompactRequest, context: Ctx) -> pb.CompactResponse:
        run_id = validate_id(request.run_id)
        summary = [message_from_pb(m, f"summary[{i}]") for i, m in enumerate(request.summary)]
        check_summary(summary)
        rejected = pb.COMPACT_STATUS_REJECTED
        async with self._head(run_id, request.lease_id, write=True) as held:
            st = held.state
            assert held.lease is not None
            if st.pending is not None:
                return pb.CompactResponse(status=rejected, reason="turn_running")
            msgs = governed(st.messages)
            if not msgs:
                return pb.CompactResponse(status=rejected, reason="empty_history")
            start = tail_start(msgs, request.keep_last)
            new = governed([*summary, *msgs[start:]])
            if start == 0 or len(new) >= len(msgs):  # it would not shrink the history
                return pb.CompactResponse(status=rejected, reason="nothing_to_compact")
            pre = None
            if not request.skip_checkpoint:
                label = request.checkpoint_label or "before compaction"
                pre = await self._take(held, "pre_compaction", label)
                failpoint("op_after_checkpoint")
            covered = (1, st.last_seq)
            try:
                rec = self._rebase(held.lease, "compaction", new, None, covered)
                results = await self.commit(held.lease, [rec])
            except JournaldError as err:
                return pb.CompactResponse(
                    status=pb.COMPACT_STATUS_FAILED,
                    reason=err.code,
                    checkpoint_id=pre.checkpoint_id if pre else "",
                )
            failpoint("op_after_rebase")
        return pb.CompactResponse(
            status=pb.COMPACT_STATUS_COMPACTED,
            checkpoint_id=pre.checkpoint_id if pre else "",
            removed_range=pb.SeqRange(from_seq=covered[0], to_seq=covered[1]),
            ack=ack_of(results[0]),
        )

    # --- fork -----------------------------------------------------------------------------

    @unary
    async def Fork(self, request: pb.ForkRequest, context: Ctx) -> pb.ForkResponse:
        source = validate_id(request.run_id)
        new_run = validate_id(request.new_run_id or f"fork-{new_id().lower()}", "new run id")
        cp: Checkpoint | None = None
        if request.checkpoint_id:
            await self._require_run(source)
            cp = await self._checkpoint_of(source, request.checkpoint_id)
            async with self._head(source, "", write=False) as held:
                src = held.state
            msgs, at_seq = cp.messages, cp.meta.seq
        else:
            async with self._head(source, "", write=False) as held:
                src = held.state
                if src.pending is not None:
                    raise turn_running(src, "fork the head")
                msgs, at_seq = governed(src.messages), src.last_seq
        assert src.fingerprint is not None
        lineage: dict[str, Any] = {"forked_from_run_id": source}
        if cp is not None:
            lineage["forked_from_checkpoint_id"] = cp.checkpoint_id
        lineage["forked_at_seq"] = at_seq
        now = utc_ts()
        payload: dict[str, Any] = {
            "run_id": new_run,
            "created": now,
            "fingerprint": src.fingerprint.as_json(),
            "prompt": list(src.prompt),
            "interactive": src.interactive,
        }
        labels = dict(request.labels) or dict(src.labels)
        if labels:
            payload["labels"] = labels
        payload["lineage"] = lineage
        meta = make_record(1, "meta", payload, GENESIS, now)
        self._check(meta)
        # Framework state travels with a fork of the head (a checkpoint holds only the
        # conversation, so a fork from one starts without state).
        carried = src.state_entries() if cp is None else []
        async with self._daemon_lease(new_run, create=meta) as lease:
            await self._copy_attachments(source, new_run, msgs)
            for digest in sorted({v.sha256 for _, _, v in carried if v.sha256}):
                await self.attachments.put(new_run, await self.attachments.get(source, digest))
            rec = self._rebase(lease, "fork", governed(msgs), cp, None)
            await self.commit(lease, [rec, *self._state_copies(rec, carried)])
            state = lease.state
        return pb.ForkResponse(run_id=new_run, state=state_to_pb(state))

    def _state_copies(
        self, after: Record, entries: Sequence[tuple[str, str, StateValue]]
    ) -> list[Record]:
        """State records re-creating ``entries`` (oldest write first), chained after ``after``."""
        out: list[Record] = []
        prev = after
        for ns, key, v in entries:
            payload: dict[str, Any] = {"namespace": ns, "key": key, "type": v.type}
            if v.sha256:
                payload |= {"sha256": v.sha256, "size": v.size}
            else:
                payload["data"] = v.data
            prev = make_record(prev.seq + 1, "state", payload, prev.hash, after.ts)
            self._check(prev)
            out.append(prev)
        return out

    # --- export / import ------------------------------------------------------------------

    @unary
    async def ExportCheckpoint(
        self, request: pb.ExportCheckpointRequest, context: Ctx
    ) -> pb.ExportCheckpointResponse:
        run_id = validate_id(request.run_id)
        await self._require_run(run_id)
        cp = await self._checkpoint_of(run_id, request.checkpoint_id)
        blobs = {d: await self.attachments.get(run_id, d) for d in attachment_refs(cp.messages)}
        return pb.ExportCheckpointResponse(data=export_bytes(cp, blobs))

    @unary
    async def ImportCheckpoint(
        self, request: pb.ImportCheckpointRequest, context: Ctx
    ) -> pb.ImportCheckpointResponse:
        run_id = validate_id(request.run_id)
        ex = verify_export(request.data)  # everything is checked before anything is written
        async with self._head(run_id, "", write=False) as held:
            cp = imported(ex, run_id=run_id, seq=held.state.last_seq, created=utc_ts())
            for data in ex.attachments.values():  # content-addressed: idempotent
                await self.attachments.put(run_id, data)
            await self._store_checkpoint(cp)
        return pb.ImportCheckpointResponse(checkpoint=meta_to_pb(cp.meta))

    # --- attachments ----------------------------------------------------------------------

    async def _copy_attachments(self, source: str, target: str, msgs: Sequence[Message]) -> None:
        for digest in sorted(attachment_refs(msgs)):
            await self.attachments.put(target, await self.attachments.get(source, digest))

    @unary
    async def PutAttachment(
        self, request: pb.PutAttachmentRequest, context: Ctx
    ) -> pb.PutAttachmentResponse:
        run_id = validate_id(request.run_id)
        if len(request.data) > MAX_ATTACHMENT_BYTES:
            raise InvalidRequest(
                f"field data: the attachment is {len(request.data)} bytes; the limit is 8 MiB "
                f"({MAX_ATTACHMENT_BYTES} bytes): keep larger files outside the journal and "
                "journal a reference (a path or URL) instead",
                metadata={
                    "field": "data",
                    "bytes": len(request.data),
                    "limit_bytes": MAX_ATTACHMENT_BYTES,
                },
            )
        await self._require_run(run_id)
        if not request.media_type:
            raise InvalidRecord(
                "field media_type: an attachment needs a media type, e.g. image/png",
                metadata={"field": "media_type"},
            )
        block = attachment_block(
            sha256_hex(request.data), len(request.data), request.media_type, request.name
        )
        validate_payload("user", {"content": [block]})
        digest, existed = await self.attachments.put(run_id, request.data)
        return pb.PutAttachmentResponse(
            sha256=digest,
            size=len(request.data),
            block_json=canonical_json(block),
            existed=existed,
        )

    @unary
    async def GetAttachment(
        self, request: pb.GetAttachmentRequest, context: Ctx
    ) -> pb.GetAttachmentResponse:
        run_id = validate_id(request.run_id)
        await self._require_run(run_id)
        data = await self.attachments.get(run_id, valid_sha256(request.sha256))
        return pb.GetAttachmentResponse(data=data, sha256=request.sha256, size=len(data))

    # --- history --------------------------------------------------------------------------

    async def _conversation(
        self, run_id: str, view: int = pb.HISTORY_VIEW_UNSPECIFIED
    ) -> Conversation:
        """The message list History pages (``view``) with the seq it reflects and the open
        turn: from the lease's cached state when held, else from a small cache of dormant runs
        keyed by what ``Store.info`` reports (any append, prune or re-creation changes the
        key), else by folding the stored records."""
        lease = self.leases.held(run_id)
        if lease is not None:
            st = lease.state
            return self._view_of(run_id, view, (lease.lease_id, st.last_seq, st.last_hash), st)
        key, st = await self._dormant_state(run_id)
        return self._view_of(run_id, view, key, st)

    def _view_of(self, run_id: str, view: int, key: Any, st: RunState) -> Conversation:
        pending = st.pending.copy() if st.pending is not None else None
        if view == pb.HISTORY_VIEW_STATE:
            return Conversation(st.messages, st.last_seq, pending)
        # a client pages a governed view in many calls: derive it once per state
        cache: OrderedDict[tuple[str, int], tuple[Any, list[Message]]] = self.__dict__.setdefault(
            "_view_cache", OrderedDict()
        )
        hit = cache.get((run_id, view))
        if key is not None and hit is not None and hit[0] == key:
            cache.move_to_end((run_id, view))
            return Conversation(hit[1], st.last_seq, pending)
        if view == pb.HISTORY_VIEW_GOVERNED:
            msgs = governance.governed_messages(st)[0]
        else:
            msgs = governed(st.messages)
        if key is not None:  # no key: the store cannot say when the run changes
            cache[(run_id, view)] = (key, msgs)
            while len(cache) > HISTORY_CACHE_RUNS:
                cache.popitem(last=False)
        return Conversation(msgs, st.last_seq, pending)

    async def _dormant_state(self, run_id: str) -> tuple[Any, RunState]:
        """The folded state of a run no lease holds, and its cache key (None when the store
        cannot say; then it is folded every time)."""
        try:
            info = await self.store.info(run_id)
        except (OSError, StoreCorrupted):  # the fold below names the damage precisely
            return None, await fold_stored(self.store, run_id)
        key = (info.created, info.updated, info.last_seq, info.record_count, info.bytes)
        cache: OrderedDict[str, tuple[Any, RunState]] = self.__dict__.setdefault(
            "_history_cache", OrderedDict()
        )
        hit = cache.get(run_id)
        if hit is not None and hit[0] == key:
            cache.move_to_end(run_id)
            return hit
        # a read writes nothing: the fold marks that index a run for tail pages are taken
        # when a writer (a lease, the daemon's own) folds it and saved when it ends
        st = await fold_stored(self.store, run_id)
        cache[run_id] = (key, st)
        while len(cache) > HISTORY_CACHE_RUNS:
            cache.popitem(last=False)
        return key, st

    def _pending_marks(self) -> dict[str, list[dict[str, Any]]]:
        marks: dict[str, list[dict[str, Any]]] = self.__dict__.setdefault("_fold_marks", {})
        return marks

    def index_on_close(self, run_id: str, marks: list[dict[str, Any]]) -> None:
        """The fold marks a writer took while folding the run as it opened it: saved with
        the ones its commits take when its lease ends (``save_fold_mark``)."""
        self._pending_marks()[run_id] = list(marks)

    def note_fold_mark(self, run_id: str, mark: dict[str, Any] | None) -> None:
        """Once a commit is durable: remember its fold mark (``mark_of`` the state it left;
        None while a turn is open) every ``MARK_EVERY`` records (in memory until the lease
        ends)."""
        if mark is None:
            return
        marks = self._pending_marks().setdefault(run_id, [])
        if not marks or mark["seq"] - marks[-1]["seq"] >= MARK_EVERY:
            marks.append(mark)

    async def _save_marks(self, run_id: str, new: list[dict[str, Any]]) -> None:
        old = await self._load_marks(run_id)
        last = new[0]["seq"] if new else 1 << 62
        kept = [m for m in old if m["seq"] < last] + new
        await self.checkpoints.save_mark(run_id, {"marks": kept[-MARKS_KEPT:]})

    async def _load_marks(self, run_id: str) -> list[dict[str, Any]]:
        doc = await self.checkpoints.load_mark(run_id)
        marks = doc.get("marks") if doc else None
        ok = []
        for m in marks if isinstance(marks, list) else []:
            if (
                isinstance(m, dict)
                and type(m.get("seq")) is int
                and type(m.get("messages")) is int
                and isinstance(m.get("hash"), str)
                and isinstance(m.get("last_role"), str)
            ):
                ok.append(m)
        return sorted(ok, key=lambda m: m["seq"])

    async def save_fold_mark(self, lease: Lease) -> None:
        """Lease-close hook: persist the marks taken while the lease lived, and the last."""
        marks = self._pending_marks().pop(lease.run_id, [])
        st = await self.settled_state(lease)
        if st.pending is None and st.last_seq and (not marks or marks[-1]["seq"] != st.last_seq):
            marks.append(mark_of(st))
        if marks:
            await self._save_marks(lease.run_id, marks)

    async def _tail_page(self, run_id: str, offset: int, limit: int) -> tuple[Page, Window] | None:
        """A page folded from the newest usable fold mark before it: reads only the segments
        from that mark's seq to the end. None when no mark serves (the caller folds in full)."""
        marks = await self._load_marks(run_id)
        if limit > 0:
            marks = [m for m in marks if m["messages"] < offset]
        for m in reversed(marks[-4:]):
            mark = FoldMark(m["seq"], m["messages"], m["last_role"], 0)
            records = [r async for r in self.store.iter_records(run_id, mark.seq)]
            if not records or records[0].seq != mark.seq or records[0].hash != m["hash"]:
                continue  # the run changed under the mark (pruned, re-created)
            w = fold_window(mark, records[1:])
            p = page_window(w, offset, limit)
            if p is None and limit <= 0:
                at = min(offset, w.total)
                p = Page([], w.total, at, at)
            if p is not None:
                return p, w
        return None

    @unary
    async def History(self, request: pb.HistoryRequest, context: Ctx) -> pb.HistoryResponse:
        run_id = validate_id(request.run_id)
        view = request.view
        tail = None
        # fold marks count the fold's own messages: they serve the stored view alone (the
        # cleaned-up and governed views can drop and merge messages, so their indexes differ)
        if view == pb.HISTORY_VIEW_STATE and self.leases.held(run_id) is None:
            tail = await self._tail_page(run_id, request.offset, request.limit)
        if tail is not None:
            p, last_seq, pending = tail[0], tail[1].last_seq, tail[1].pending
        else:
            conv = await self._conversation(run_id, view)
            p = page(conv.messages, request.offset, request.limit)
            last_seq, pending = conv.last_seq, conv.pending
        out = pb.HistoryResponse(
            messages=messages_to_pb(p.messages),
            total=p.total,
            offset=p.offset,
            next_offset=p.next_offset,
            last_seq=last_seq,
        )
        if pending is not None:
            out.pending.CopyFrom(pending_to_pb(pending))
        check_fits(
            out, self.limits.max_message_bytes, "the History page", ASK_FOR_SMALLER_PAGE, run_id
        )
        return out
