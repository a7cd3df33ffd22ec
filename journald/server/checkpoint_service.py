"""Checkpoint, compaction, restore, fork and export/import RPCs (docs/design.md#checkpoints).

Every one reads the head of a run through ``Runs.head`` (serialized with the holder's appends,
see ``journald.server.runs``) and writes rebases through the held run's writer
(``RunWriter.commit``).

Idle only: Checkpoint, Compact, Restore and Fork of the head are refused with
``turn_running`` while the run has a pending turn with unanswered tool calls (Compact
answers ``REJECTED``/``turn_running``; the others fail with the error).

Everything handed back as a conversation (checkpoints, rebases of restore/fork/compaction) is
the governed, paired view (``journald.core.governance.sanitize``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import grpc
from journald_proto import journal_pb2 as pb

from journald import failpoints
from journald.clock import utc_ts
from journald.core.checkpoints import (
    Checkpoint,
    CheckpointMeta,
    Exported,
    attachment_refs,
    export_bytes,
    governed,
    valid_checkpoint_id,
    verify_export,
)
from journald.core.errors import (
    CheckpointNotFound,
    InvalidRecord,
    JournaldError,
    SessionMismatch,
    SessionNotFound,
    TurnRunning,
)
from journald.core.fold import Message, RunState, StateValue
from journald.core.pages import cut
from journald.core.paging import tail_start
from journald.core.rebase_chunks import PagedRebase, rebase_payload
from journald.core.records import GENESIS, Record, make_record, validate_id
from journald.core.schema import validate_payload
from journald.server.attachments import copy_attachments, copy_referenced
from journald.server.convert import message_from_pb, state_to_pb
from journald.server.edge import unary
from journald.server.message_window import ask_for_state, check_fits, fill_fitting, room_left
from journald.server.runs import Held, Runs, ack_pb
from journald.storage.checkpoint_base import imported, make_checkpoint, new_id

Ctx = grpc.aio.ServicerContext[Any, Any]
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


def turn_running(state: RunState, what: str) -> TurnRunning:
    ids = [c.id for c in state.pending.unanswered] if state.pending else []
    return TurnRunning(
        f"run {state.run_id}: cannot {what} while tool calls {ids} of seq "
        f"{state.pending.seq if state.pending else 0} are unanswered; finish the turn (append a "
        "result for each, is_error if abandoned) and retry",
        metadata={"run_id": state.run_id},
    )


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
    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    # --- checkpoints ----------------------------------------------------------------------

    def _event(self, kind: str, meta: CheckpointMeta) -> None:
        self.runs.hub.publish_checkpoint(
            meta.run_id, pb.CheckpointEvent(kind=kind, checkpoint=meta_to_pb(meta))
        )

    async def _store_checkpoint(self, cp: Checkpoint) -> None:
        await self.runs.checkpoints.put(cp)
        self._event("created", cp.meta)
        if self.runs.checkpoint_max > 0:
            # oldest first: ids are minted in creation order (checkpoint_base.new_id); the one
            # just made is never the one evicted
            metas = await self.runs.checkpoints.list(cp.meta.run_id)
            older = [m for m in metas if m.checkpoint_id != cp.checkpoint_id]
            for old in older[: max(0, len(older) + 1 - self.runs.checkpoint_max)]:
                if await self.runs.checkpoints.delete(old.run_id, old.checkpoint_id):
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
            cp = await self.runs.checkpoints.get(run_id, cid)
        except CheckpointNotFound:
            owner = await self.runs.checkpoints.owner(cid)
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

    async def exported(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """The checkpoint an export of ``run_id`` names (both export RPCs)."""
        await self.runs.require_run(validate_id(run_id))
        return await self._checkpoint_of(run_id, checkpoint_id)

    def _rebase(
        self,
        after: tuple[int, str],
        reason: str,
        messages: Sequence[Message],
        cp: Checkpoint | None,
        covered: tuple[int, int] | None,
    ) -> tuple[Record, PagedRebase]:
        """The rebase after record ``after`` (seq, hash) holding ``messages`` as page
        references and a short tail, checked against the limits; nothing is written yet
        (the pages, and from 128 pages the chunks of their references, are stored by
        ``_write_pages``, before the record)."""
        paged = cut(messages)
        base: dict[str, Any] = {"reason": reason}
        if cp is not None:
            base["checkpoint_id"] = cp.checkpoint_id
            base["checkpoint_hash"] = cp.meta.hash
        if covered is not None:
            base["covered"] = {"from_seq": covered[0], "to_seq": covered[1]}
        payload, rebase = rebase_payload(base, paged)
        rec = make_record(after[0] + 1, "rebase", payload, after[1], utc_ts())
        self.runs.gate.record(rec)  # refused here, before anything is written
        return rec, rebase

    async def _write_pages(self, run_id: str, paged: PagedRebase) -> None:
        """The pages before the record that references them: a crash in between leaves
        pages nothing references, never a reference to a page that is not there."""
        await self.runs.pages.put_rebase(run_id, paged)
        if failpoints.ARMED:
            failpoints.hit("op_after_pages")

    async def _undo_checkpoint(self, cp: Checkpoint | None) -> None:
        """A refused or failed operation leaves no checkpoint of its own behind."""
        if cp is not None:
            with contextlib.suppress(JournaldError):
                if await self.runs.checkpoints.delete(cp.meta.run_id, cp.checkpoint_id):
                    self._event("deleted", cp.meta)

    @unary
    async def Checkpoint(
        self, request: pb.CheckpointRequest, context: Ctx
    ) -> pb.CheckpointResponse:
        run_id = validate_id(request.run_id)
        async with self.runs.head(run_id, "", write=False) as held:
            if held.state.pending is not None:
                raise turn_running(held.state, "take a checkpoint")
            cp = await self._take(held, "manual", request.label)
        return pb.CheckpointResponse(checkpoint=meta_to_pb(cp.meta))

    @unary
    async def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: Ctx
    ) -> pb.ListCheckpointsResponse:
        run_id = validate_id(request.run_id)
        await self.runs.require_run(run_id)
        metas = await self.runs.checkpoints.list(run_id)
        return pb.ListCheckpointsResponse(checkpoints=[meta_to_pb(m) for m in metas])

    @unary
    async def DeleteCheckpoint(
        self, request: pb.DeleteCheckpointRequest, context: Ctx
    ) -> pb.DeleteCheckpointResponse:
        run_id = validate_id(request.run_id)
        cid = valid_checkpoint_id(request.checkpoint_id)
        try:
            cp = await self.runs.checkpoints.get(run_id, cid)
        except (CheckpointNotFound, SessionNotFound):
            return pb.DeleteCheckpointResponse(deleted=False)
        deleted = await self.runs.checkpoints.delete(run_id, cid)
        if deleted:
            self._event("deleted", cp.meta)
        return pb.DeleteCheckpointResponse(deleted=deleted)

    # --- restore / compact ----------------------------------------------------------------

    @unary
    async def Restore(self, request: pb.RestoreRequest, context: Ctx) -> pb.RestoreResponse:
        run_id = validate_id(request.run_id)
        await self.runs.require_run(run_id)
        cp = await self._checkpoint_of(run_id, request.checkpoint_id)
        async with self.runs.head(run_id, request.lease_id, write=True) as held:
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
            journal = held.lease.journal
            msgs = governed(cp.messages)
            # built and checked first: a refused rebase writes nothing, no checkpoint either
            rec, paged = self._rebase(
                (journal.last_seq, journal.last_hash), "restore", msgs, cp, (1, st.last_seq)
            )
            pre = None
            try:
                if not request.skip_checkpoint:
                    label = f"before restoring {cp.checkpoint_id}"
                    pre = await self._take(held, "pre_restore", label)
                    if failpoints.ARMED:
                        failpoints.hit("op_after_checkpoint")
                await self._write_pages(run_id, paged)
                results = await held.lease.writer.commit([rec], paged.resolver())
            except JournaldError:
                await self._undo_checkpoint(pre)
                raise
            if failpoints.ARMED:
                failpoints.hit("op_after_rebase")
            after = len(held.lease.state.messages)
        return pb.RestoreResponse(
            from_messages=before,
            to_messages=after,
            pre_restore_checkpoint_id=pre.checkpoint_id if pre else "",
            ack=ack_pb(results[0]),
            warnings=warnings,
        )

    @unary
    async def Compact(self, request: pb.CompactRequest, context: Ctx) -> pb.CompactResponse:
        run_id = validate_id(request.run_id)
        summary = [message_from_pb(m, f"summary[{i}]") for i, m in enumerate(request.summary)]
        check_summary(summary)
        rejected = pb.COMPACT_STATUS_REJECTED
        async with self.runs.head(run_id, request.lease_id, write=True) as held:
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
            covered = (1, st.last_seq)
            journal = held.lease.journal
            after = (journal.last_seq, journal.last_hash)
            pre = None
            try:
                # built and checked before the checkpoint: a refused rebase writes nothing
                rec, paged = self._rebase(after, "compaction", new, None, covered)
                if not request.skip_checkpoint:
                    label = request.checkpoint_label or "before compaction"
                    pre = await self._take(held, "pre_compaction", label)
                    if failpoints.ARMED:
                        failpoints.hit("op_after_checkpoint")
                await self._write_pages(run_id, paged)
                results = await held.lease.writer.commit([rec], paged.resolver())
            except JournaldError as err:
                await self._undo_checkpoint(pre)
                return pb.CompactResponse(status=pb.COMPACT_STATUS_FAILED, reason=err.code)
            if failpoints.ARMED:
                failpoints.hit("op_after_rebase")
        return pb.CompactResponse(
            status=pb.COMPACT_STATUS_COMPACTED,
            checkpoint_id=pre.checkpoint_id if pre else "",
            removed_range=pb.SeqRange(from_seq=covered[0], to_seq=covered[1]),
            ack=ack_pb(results[0]),
        )

    # --- fork -----------------------------------------------------------------------------

    @unary
    async def Fork(self, request: pb.ForkRequest, context: Ctx) -> pb.ForkResponse:
        source = validate_id(request.run_id)
        new_run = validate_id(request.new_run_id or f"fork-{new_id().lower()}", "new run id")
        cp: Checkpoint | None = None
        if request.checkpoint_id:
            await self.runs.require_run(source)
            cp = await self._checkpoint_of(source, request.checkpoint_id)
            # only the source's facts (fingerprint, prompt): a run held elsewhere may move on
            async with self.runs.head(source, "", write=False, exclusive=False) as held:
                src = held.state
            msgs, at_seq = cp.messages, cp.meta.seq
        else:
            async with self.runs.head(source, "", write=False) as held:
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
        meta = make_record(1, "meta", payload, GENESIS, now)  # gated by the acquire
        # Framework state travels with a fork of the head (a checkpoint holds only the
        # conversation, so a fork from one starts without state).
        carried = src.state_entries() if cp is None else []
        # every record is built and checked before the run is created: a refused fork
        # leaves no run behind
        rec, paged = self._rebase((meta.seq, meta.hash), "fork", governed(msgs), cp, None)
        records = [rec, *self._state_copies(rec, carried)]
        for copy in records[1:]:
            self.runs.gate.record(copy)
        created = False
        try:
            async with self.runs.daemon_lease(new_run, create=meta) as lease:
                created = True
                await copy_referenced(self.runs.attachments, source, new_run, msgs)
                digests = {v.sha256 for _, _, v in carried if v.sha256}
                await copy_attachments(self.runs.attachments, source, new_run, digests)
                await self._write_pages(new_run, paged)
                await lease.writer.commit(records, paged.resolver())
                if failpoints.ARMED:
                    failpoints.hit("op_after_rebase")
                out = await self._fork_answer(new_run, lease.state, request.message_window)
        except JournaldError:
            if created:  # the answer too: a fork whose answer fails leaves no run behind
                await self._discard_run(new_run)
            raise
        return out

    async def _fork_answer(self, run_id: str, state: RunState, window: int) -> pb.ForkResponse:
        """The new run's state with the messages asked for, or the largest clean tail of them
        that fits in the max message size (``messages_offset`` says where it starts): the
        fork is written, so its answer is never refused for its size. What still does not fit
        (the fields other than the messages alone) is ``response_too_large`` here, before it
        is sent, so that the caller discards the run."""
        limit = self.runs.limits.max_message_bytes
        out = pb.ForkResponse(run_id=run_id, state=state_to_pb(state, messages=False))
        msgs = await self.runs.pages.window(run_id, state.messages, window)
        out.state.messages_offset = fill_fitting(
            out.state.messages, msgs, window, room_left(out, limit)
        )
        # the messages are already cut to fit: only a larger limit helps (window 1's advice)
        check_fits(out, limit, "the fork's state", ask_for_state(1), run_id)
        return out

    async def _discard_run(self, run_id: str) -> None:
        """Remove a run a failed fork created (its records, pages and attachments)."""
        with contextlib.suppress(JournaldError):
            async with self.runs.unheld(run_id):
                await self.runs.store.delete(run_id)
                await self.runs.checkpoints.drop_run(run_id)
                await self.runs.attachments.drop_run(run_id)
                self.runs.pages.forget(run_id)
            self.runs.owners.forget(run_id)
            self.runs.changes.changed(run_id)

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
            out.append(prev)
        return out

    # --- export / import ------------------------------------------------------------------

    async def store_import(self, run_id: str, data: bytes) -> CheckpointMeta:
        """Verify ``data`` completely, then store it as a new checkpoint of ``run_id``:
        everything is checked before anything is written."""
        return await self.store_verified(run_id, verify_export(data, validate_payload))

    async def store_verified(self, run_id: str, ex: Exported) -> CheckpointMeta:
        """Store a verified export as a new checkpoint of ``run_id`` (both import RPCs)."""
        async with self.runs.head(run_id, "", write=False) as held:
            cp = imported(ex, run_id=run_id, seq=held.state.last_seq, created=utc_ts())
            for blob in ex.attachments.values():  # content-addressed: idempotent
                await self.runs.attachments.put(run_id, blob)
            await self._store_checkpoint(cp)
        return cp.meta

    @unary
    async def ExportCheckpoint(
        self, request: pb.ExportCheckpointRequest, context: Ctx
    ) -> pb.ExportCheckpointResponse:
        run_id = request.run_id
        cp = await self.exported(run_id, request.checkpoint_id)
        blobs = {
            d: await self.runs.attachments.get(run_id, d) for d in attachment_refs(cp.messages)
        }
        return pb.ExportCheckpointResponse(data=export_bytes(cp, blobs))

    @unary
    async def ImportCheckpoint(
        self, request: pb.ImportCheckpointRequest, context: Ctx
    ) -> pb.ImportCheckpointResponse:
        meta = await self.store_import(validate_id(request.run_id), request.data)
        return pb.ImportCheckpointResponse(checkpoint=meta_to_pb(meta))
