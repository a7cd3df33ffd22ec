"""Response decoding: the daemon's protobuf answers as the client's dataclasses
(``journald_client.state``), free of I/O, shared by ``Client`` and ``AsyncClient``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from journald_proto import journal_pb2 as pb

from journald_client import errors
from journald_client.content_blocks import _json_list
from journald_client.fingerprint import Fingerprint
from journald_client.state import (
    Ack,
    Anomaly,
    AttachmentRef,
    Counters,
    GovernedView,
    HistoryPage,
    JournalRecord,
    LeaseHolder,
    LeaseWarning,
    Message,
    PendingResult,
    PendingTurn,
    QuarantinedRecord,
    RecoverResult,
    RunInfo,
    RunState,
    StateEntry,
    Terminal,
    ToolCall,
    VerifyResult,
)

_DURABILITY = {
    pb.DURABILITY_UNSPECIFIED: "unspecified",
    pb.DURABILITY_MEMORY: "memory",
    pb.DURABILITY_FSYNC_LOCAL: "fsync_local",
    pb.DURABILITY_JETSTREAM_ACK: "jetstream_ack",
}


def message_from_pb(m: pb.Message) -> Message:
    return {"role": m.role, "content": _json_list(m.content_json)}


def pending_from_pb(p: pb.PendingTurn) -> PendingTurn:
    return PendingTurn(
        message=message_from_pb(p.message),
        iteration=p.iteration,
        stop_reason=p.stop_reason,
        results=[
            PendingResult(r.tool_use_id, _json_list(r.content_json), r.is_error, r.seq)
            for r in p.results
        ],
        answered_ids=list(p.answered_ids),
        unanswered=[ToolCall(c.id, c.name, c.input_json) for c in p.unanswered],
        seq=p.seq,
    )


def state_from_pb(st: pb.RunState, warnings: Sequence[pb.Warning] = ()) -> RunState:
    pending = pending_from_pb(st.pending) if st.HasField("pending") else None
    c = st.counters
    lineage = None
    if st.HasField("lineage"):
        lineage = {
            "forked_from_run_id": st.lineage.forked_from_run_id,
            "forked_from_checkpoint_id": st.lineage.forked_from_checkpoint_id,
            "forked_at_seq": st.lineage.forked_at_seq,
        }
    return RunState(
        run_id=st.run_id,
        fingerprint=Fingerprint.from_pb(st.fingerprint) if st.HasField("fingerprint") else None,
        interactive=st.interactive,
        messages=[message_from_pb(m) for m in st.messages],
        pending=pending,
        counters=Counters(
            c.llm_calls,
            c.tool_calls,
            c.remote_tool_calls,
            c.input_tokens,
            c.output_tokens,
            c.cache_read_tokens,
            c.cache_creation_tokens,
        ),
        next_iteration=st.next_iteration,
        last_stop_reason=st.last_stop_reason,
        terminal=(
            Terminal(st.terminal.reason, st.terminal.message) if st.HasField("terminal") else None
        ),
        terminal_is_last=st.terminal_is_last,
        last_seq=st.last_seq,
        last_hash=st.last_hash,
        resume_at_input_boundary=st.resume_at_input_boundary,
        anomalies=[Anomaly(a.seq, a.kind, a.detail) for a in st.anomalies],
        labels=dict(st.labels),
        prompt=_json_list(st.prompt_json),
        lineage=lineage,
        warnings=[LeaseWarning(w.code, w.message) for w in warnings],
        state=[
            StateEntry(e.namespace, e.key, e.type, bytes(e.data), e.sha256, e.size, e.seq)
            for e in st.state
        ],
    )


def governed_from_pb(resp: pb.FoldResponse) -> GovernedView:
    g = resp.governance
    return GovernedView(
        messages=[message_from_pb(m) for m in resp.governed_messages],
        synthesized_results=g.synthesized_results,
        dropped_messages=g.dropped_messages,
        dropped_blocks=g.dropped_blocks,
        state=state_from_pb(resp.state),
    )


def ack_from_pb(a: pb.Ack) -> Ack:
    return Ack(a.seq, a.hash, _DURABILITY.get(a.durability, "unspecified"), a.duplicate)


def acks_from_pb(resp: pb.AppendResponse, sent: Sequence[pb.Record]) -> list[Ack]:
    acks = [ack_from_pb(a) for a in resp.acks]
    if [a.seq for a in acks] != [r.seq for r in sent]:
        raise errors.JournaldError(
            f"the daemon acknowledged seqs {[a.seq for a in acks]} for an append of seqs "
            f"{[r.seq for r in sent]}; this is a daemon bug"
        )
    return acks


def record_from_pb(rec: pb.Record) -> JournalRecord:
    kind = str(rec.WhichOneof("payload") or "")
    payload: dict[str, Any] = {}
    if rec.canonical:
        obj = json.loads(rec.canonical)
        if isinstance(obj, dict) and isinstance(obj.get(kind), dict):
            payload = obj[kind]
    trace = (
        {"trace_id": rec.trace.trace_id, "span_id": rec.trace.span_id}
        if rec.HasField("trace") and rec.trace.trace_id
        else None
    )
    return JournalRecord(
        seq=rec.seq,
        kind=kind,
        ts=rec.ts,
        prev=rec.prev,
        hash=rec.hash,
        canonical=bytes(rec.canonical),
        trace=trace,
        payload=payload,
    )


def run_info_from_pb(r: pb.RunInfo) -> RunInfo:
    return RunInfo(
        r.run_id,
        r.created,
        r.updated,
        r.model,
        r.prompt_preview,
        r.status,
        r.record_count,
        r.bytes,
        r.last_seq,
        holder=(
            LeaseHolder(r.holder.name, r.holder.pid, r.holder.host, r.holder.cwd, r.held_since)
            if r.HasField("holder")
            else None
        ),
        labels=dict(r.labels),
        pending_calls=r.pending_calls if r.HasField("pending_calls") else None,
        error=r.error,
    )


def verify_from_pb(v: pb.VerifyResponse) -> VerifyResult:
    return VerifyResult(v.records, v.last_seq, v.last_hash, v.segments)


def recover_from_pb(run_id: str, r: pb.RecoverResponse) -> RecoverResult:
    return RecoverResult(
        run_id,
        r.quarantined,
        [
            QuarantinedRecord(q.file, q.line, q.seq, q.sha256, q.bytes, q.evidence, q.reason)
            for q in r.records
        ],
        r.directory,
        r.hole.from_seq,
        r.hole.to_seq,
        r.rebase_seq,
        r.repaired,
        r.last_seq,
    )


def history_from_pb(r: pb.HistoryResponse) -> HistoryPage:
    return HistoryPage(
        messages=[message_from_pb(m) for m in r.messages],
        total=r.total,
        offset=r.offset,
        next_offset=r.next_offset,
        last_seq=r.last_seq,
        pending=pending_from_pb(r.pending) if r.HasField("pending") else None,
        at_index=r.at_index,
        at_seq=r.at_seq,
    )


def attachment_from_pb(r: pb.PutAttachmentResponse) -> AttachmentRef:
    block = json.loads(r.block_json) if r.block_json else {}
    return AttachmentRef(
        sha256=r.sha256,
        size=r.size,
        block=block if isinstance(block, dict) else {},
        existed=r.existed,
    )
