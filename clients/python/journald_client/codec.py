"""Request building and response decoding shared by ``Client`` and ``AsyncClient``.

Everything here is free of I/O: the two transports (``client.py``, ``aio.py``) only move the
messages built here and hand the answers back here to be decoded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from journald_proto import journal_pb2 as pb
from journald_proto.conventions import now_ts as now_ts  # re-exported: one timestamp form

from journald_client import errors, telemetry
from journald_client.fingerprint import Fingerprint, canonical_json
from journald_client.own_records import same_record as same_record  # the lost-ack compare
from journald_client.state import (
    Ack,
    Anomaly,
    AttachmentRef,
    Block,
    CheckpointMeta,
    CompactResult,
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
    RestoreResult,
    RunInfo,
    RunState,
    StateEntry,
    Terminal,
    ToolCall,
    ToolOutput,
    VerifyResult,
)

TERMINAL_REASONS = ("completed", "suspended", "error", "budget", "max_iterations")
_DURABILITY = {
    pb.DURABILITY_UNSPECIFIED: "unspecified",
    pb.DURABILITY_MEMORY: "memory",
    pb.DURABILITY_FSYNC_LOCAL: "fsync_local",
    pb.DURABILITY_JETSTREAM_ACK: "jetstream_ack",
}


_SAFE_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,127}\Z")


def run_id_for(name: str, prefix: str) -> str:
    """A run id for a framework's own id (a thread, a session): the id itself when it is a
    safe run id (the usual uuid or slug), otherwise ``prefix`` and a digest of it."""
    if _SAFE_ID.match(name) and len(name.encode()) <= 128:
        return name
    return prefix + hashlib.sha256(name.encode()).hexdigest()[:40]


def prefixed_run_id(name: str, prefix: str) -> str:
    """A run id in a framework's own namespace: ``prefix`` and the id when that is a safe
    run id, otherwise ``prefix`` and a digest of it (two frameworks never share a run)."""
    candidate = prefix + name
    if _SAFE_ID.match(candidate) and len(candidate.encode()) <= 128:
        return candidate
    return prefix + hashlib.sha256(name.encode()).hexdigest()[:40]


# --- content ---------------------------------------------------------------------------


def _block(b: Mapping[str, Any]) -> Block:
    out = dict(b)
    # tool_use input and provider data are raw JSON *text* on the wire (no floats in records)
    if out.get("type") == "tool_use" and "input" in out and not isinstance(out["input"], str):
        out["input"] = canonical_json(out["input"]).decode()
    if out.get("type") == "provider" and "data" in out and not isinstance(out["data"], str):
        out["data"] = canonical_json(out["data"]).decode()
    if out.get("type") == "tool_result" and "content" in out:
        out["content"] = blocks(out["content"])
    return out


def blocks(content: str | Sequence[Mapping[str, Any]]) -> list[Block]:
    """Content blocks from a string (one text block) or a list of blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_block(b) for b in content]


def blocks_json(content: str | Sequence[Mapping[str, Any]]) -> bytes:
    return canonical_json(blocks(content))


RESULT_TEXT_TYPE = "text/plain; charset=utf-8"
RESULT_BLOCKS_TYPE = "application/json"


def result_attachment(content: str | Sequence[Mapping[str, Any]]) -> tuple[bytes, str]:
    """A tool result's content as attachment bytes (``tool_result(..., as_attachment=True)``,
    docs/protocol.md#large-tool-results): text (a string, or one text block) as UTF-8, any
    other content as the canonical JSON of its blocks."""
    items = blocks(content)
    if len(items) == 1 and set(items[0]) == {"type", "text"} and items[0]["type"] == "text":
        return str(items[0]["text"]).encode("utf-8"), RESULT_TEXT_TYPE
    return canonical_json(items), RESULT_BLOCKS_TYPE


def _json_list(data: bytes) -> list[Any]:
    if not data:
        return []
    value = json.loads(data)
    return value if isinstance(value, list) else []


# --- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One record to append, before it has a seq. ``ts`` and ``trace`` are fixed when the
    entry is built, so every retry of it sends the same bytes."""

    record: pb.Record
    auto_iteration: bool = False
    """An assistant entry built without an iteration: the writer that appends it numbers it
    (its ``next_iteration``), as ``Run.assistant`` does."""

    @property
    def kind(self) -> str:
        return str(self.record.WhichOneof("payload"))

    @staticmethod
    def _new() -> pb.Record:
        rec = pb.Record(ts=now_ts())
        cur = telemetry.current_trace()
        if cur is not None:
            rec.trace.CopyFrom(pb.TraceContext(trace_id=cur[0], span_id=cur[1]))
        return rec

    @classmethod
    def assistant(
        cls,
        content: str | Sequence[Mapping[str, Any]],
        *,
        stop_reason: str,
        iteration: int | None = None,
        usage: Mapping[str, int] | None = None,
    ) -> Entry:
        """A model call. Without ``iteration`` the appending writer numbers it (its next
        iteration, one more for each later assistant entry of the same batch)."""
        u = dict(usage or {})
        rec = cls._new()
        rec.assistant.CopyFrom(
            pb.AssistantPayload(
                message=pb.Message(role="assistant", content_json=blocks_json(content)),
                iteration=iteration or 0,
                stop_reason=stop_reason,
                usage=pb.Usage(
                    input_tokens=int(u.get("input_tokens", 0)),
                    output_tokens=int(u.get("output_tokens", 0)),
                    cache_read_tokens=int(u.get("cache_read_tokens", 0)),
                    cache_creation_tokens=int(u.get("cache_creation_tokens", 0)),
                ),
            )
        )
        return cls(rec, auto_iteration=iteration is None)

    @classmethod
    def tool_result(
        cls,
        tool_use_id: str,
        content: str | Sequence[Mapping[str, Any]],
        *,
        is_error: bool = False,
        remote: bool = False,
    ) -> Entry:
        rec = cls._new()
        rec.tool_result.CopyFrom(
            pb.ToolResultPayload(
                tool_use_id=tool_use_id,
                content_json=blocks_json(content),
                is_error=is_error,
                remote=remote,
            )
        )
        return cls(rec)

    @classmethod
    def user(cls, content: str | Sequence[Mapping[str, Any]]) -> Entry:
        rec = cls._new()
        rec.user.CopyFrom(pb.UserPayload(content_json=blocks_json(content)))
        return cls(rec)

    @classmethod
    def state(
        cls,
        namespace: str,
        key: str,
        value_type: str = "",
        data: bytes = b"",
        *,
        sha256: str = "",
        size: int = 0,
        deleted: bool = False,
    ) -> Entry:
        """A value of framework state (inline ``data``, or an attachment's ``sha256`` and
        ``size``), or with ``deleted`` the removal of the key (of the whole namespace when
        ``key`` is empty). Never part of the conversation."""
        rec = cls._new()
        rec.state.CopyFrom(
            pb.StatePayload(
                namespace=namespace,
                key=key,
                type="" if deleted else value_type,
                data=b"" if deleted else data,
                sha256="" if deleted else sha256,
                size=0 if deleted else size,
                deleted=deleted,
            )
        )
        return cls(rec)

    @classmethod
    def rebase(cls, messages: Sequence[Mapping[str, Any]], reason: str = "edit") -> Entry:
        """Replace the conversation by ``messages`` (``{role, content}`` dicts): ``edit`` when
        the writer rewrote its own history (a framework removed or replaced messages)."""
        rec = cls._new()
        rec.rebase.CopyFrom(
            pb.RebasePayload(
                reason=reason,
                messages=[
                    pb.Message(role=str(m["role"]), content_json=blocks_json(m["content"]))
                    for m in messages
                ],
            )
        )
        return cls(rec)

    @classmethod
    def terminal(cls, reason: str, message: str = "") -> Entry:
        if reason not in TERMINAL_REASONS:
            raise errors.InvalidRecord(
                f"terminal reason {reason!r} is not one of {', '.join(TERMINAL_REASONS)}"
            )
        rec = cls._new()
        rec.terminal.CopyFrom(pb.TerminalPayload(reason=reason, message=message))
        return cls(rec)


def tool_entry(call: ToolCall, outcome: object, *, remote: bool = False) -> Entry:
    """The result record for what a tool function returned or raised."""
    if isinstance(outcome, BaseException):
        text = f"{type(outcome).__name__}: {outcome}"
        return Entry.tool_result(call.id, text, is_error=True, remote=remote)
    if isinstance(outcome, ToolOutput):
        return Entry.tool_result(call.id, outcome.content, is_error=outcome.is_error, remote=remote)
    if isinstance(outcome, str):
        return Entry.tool_result(call.id, outcome, remote=remote)
    if isinstance(outcome, list):
        return Entry.tool_result(call.id, outcome, remote=remote)
    return Entry.tool_result(call.id, canonical_json(outcome).decode(), remote=remote)


def stamp(entries: Sequence[Entry], first_seq: int, next_iteration: int = 1) -> list[pb.Record]:
    """The records of a batch at consecutive seqs from ``first_seq``; assistant entries built
    without an iteration are numbered from ``next_iteration`` on."""
    out = []
    for i, e in enumerate(entries):
        rec = pb.Record()
        rec.CopyFrom(e.record)
        rec.seq = first_seq + i
        if rec.HasField("assistant"):
            if e.auto_iteration:
                rec.assistant.iteration = next_iteration
            next_iteration = rec.assistant.iteration + 1
        out.append(rec)
    return out


# --- requests --------------------------------------------------------------------------


def client_info(name: str) -> pb.ClientInfo:
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    return pb.ClientInfo(name=name, pid=os.getpid(), host=socket.gethostname(), cwd=cwd)


@dataclass(frozen=True, slots=True)
class OpenParams:
    """Everything needed to (re-)open a run; kept by a writer for reconnects."""

    run_id: str
    fingerprint: Fingerprint
    interactive: bool
    force: bool
    name: str


def open_calls_of(state: RunState) -> list[ToolCall]:
    return list(state.pending.unanswered) if state.pending is not None else []


class LeaseHandle(Protocol):
    """What both transports keep of an Open stream: its first message."""

    lease: pb.Lease


class RunView:
    """What the sync and async writers share: the state taken from the lease and the views
    of it (the transports differ only in how they call the daemon)."""

    _lease: LeaseHandle

    def _init_view(self, params: OpenParams, lease: LeaseHandle) -> None:
        self._lease = lease
        first = lease.lease
        self.run_id = params.run_id
        self.created = first.created
        self.state: RunState = self._decode_state(first.state, first.warnings)
        """The folded state when the lease was (re-)granted, or after this writer's last
        ``compact``/``restore`` (``fold()`` for the current one)."""
        self.last_seq: int = first.last_seq
        self.next_iteration: int = max(1, self.state.next_iteration)
        self._open_calls: list[ToolCall] = open_calls_of(self.state)
        self.reconnects = 0
        self.closed = False
        self._pipelined: object | None = None
        """The open pipelined writer, which alone numbers this run's seqs while it is open."""

    def _check_open(self) -> None:
        if self.closed:
            raise errors.LeaseLost(f"run {self.run_id}: this writer is closed")

    def _check_unary(self) -> None:
        """Before an append of the run's own (a record, or the rebase of a compact or a
        restore): refused while a pipelined writer numbers the seqs."""
        self._check_open()
        if self._pipelined is not None:
            raise errors.InvalidRequest(
                f"run {self.run_id}: a pipelined writer is open on this run; append through "
                "it, or leave its block first (two writers would number the same seqs)"
            )

    def _decode_state(self, st: pb.RunState, warnings: Sequence[pb.Warning]) -> RunState:
        """The state of a lease (the sync writer completes a message window lazily)."""
        return state_from_pb(st, warnings)

    @property
    def open_calls(self) -> list[ToolCall]:
        """The calls of the pending turn not answered yet, as this writer knows them: from
        the lease, then from its own appends (no round trip to the daemon)."""
        return list(self._open_calls)

    def _appended(self, records: Sequence[pb.Record]) -> None:
        """Follow this writer's own durable appends: the next iteration and the open calls."""
        for rec in records:
            kind = rec.WhichOneof("payload")
            if kind == "assistant":
                self.next_iteration = rec.assistant.iteration + 1
                content = _json_list(rec.assistant.message.content_json)
                self._open_calls = [
                    ToolCall(str(b.get("id", "")), str(b.get("name", "")), str(b.get("input", "")))
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "tool_use"
                ]
            elif kind == "tool_result":
                done = rec.tool_result.tool_use_id
                self._open_calls = [c for c in self._open_calls if c.id != done]

    def _state_changed(self, state: RunState) -> None:
        """A new folded state came from the daemon (re-open, rebase)."""
        self.state = state
        self._open_calls = open_calls_of(state)

    @property
    def lease_id(self) -> str:
        return self._lease.lease.lease_id

    @property
    def append_stream_batches(self) -> bool:
        """The daemon takes several appends in one AppendStream message (its lease says)."""
        return self._lease.lease.append_stream_batches

    @property
    def warnings(self) -> list[LeaseWarning]:
        """Notices that came with the lease (``open_tool_calls``, ``paused_turn``, ...)."""
        return list(self.state.warnings)

    @property
    def resume_at_input_boundary(self) -> bool:
        return self._lease.lease.resume_at_input_boundary


def open_request(
    params: OpenParams,
    *,
    create: bool | None,
    prompt: str | Sequence[Mapping[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
) -> pb.OpenRequest:
    """``create``: True creates only, False resumes only, None creates or resumes."""
    if create is None:
        mode = pb.OPEN_MODE_CREATE_OR_RESUME
    else:
        mode = pb.OPEN_MODE_CREATE if create else pb.OPEN_MODE_RESUME
    req = pb.OpenRequest(
        run_id=params.run_id,
        mode=mode,
        fingerprint=params.fingerprint.to_pb(),
        interactive=params.interactive,
        force=params.force,
        client=client_info(params.name),
    )
    if create is not False:
        req.prompt_json = blocks_json(prompt)
        req.labels.update(dict(labels or {}))
        req.created = now_ts()
    cur = telemetry.current_trace()
    if cur is not None:
        req.trace.CopyFrom(pb.TraceContext(trace_id=cur[0], span_id=cur[1]))
    return req


def resume_of(req: pb.OpenRequest) -> pb.OpenRequest:
    """The same Open in resume mode (what a create whose reply was lost turns into)."""
    out = pb.OpenRequest()
    out.CopyFrom(req)
    out.mode = pb.OPEN_MODE_RESUME
    return out


def created_by(req: pb.OpenRequest, meta: Mapping[str, Any]) -> bool:
    """Whether a run's meta payload is the one ``req`` would have written: the sign that an
    earlier attempt of the same create reached the daemon and only its reply was lost (the
    creation timestamp is fixed per request, so another writer's run does not match)."""
    return (
        bool(req.created)
        and meta.get("created") == req.created
        and meta.get("prompt") == _json_list(req.prompt_json)
        and meta.get("fingerprint") == Fingerprint.from_pb(req.fingerprint).as_json()
        and bool(meta.get("interactive")) == req.interactive
        and dict(meta.get("labels") or {}) == dict(req.labels)
    )


def metadata() -> tuple[tuple[str, str | bytes], ...]:
    """gRPC call metadata: the W3C ``traceparent`` of the current span, if any."""
    return tuple(telemetry.call_metadata())


# --- responses -------------------------------------------------------------------------


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


# --- checkpoints, history, attachments -------------------------------------------------

TRIGGERS = {
    pb.CHECKPOINT_TRIGGER_MANUAL: "manual",
    pb.CHECKPOINT_TRIGGER_PRE_COMPACTION: "pre_compaction",
    pb.CHECKPOINT_TRIGGER_PRE_RESTORE: "pre_restore",
    pb.CHECKPOINT_TRIGGER_PRE_PRUNE: "pre_prune",
    pb.CHECKPOINT_TRIGGER_IMPORT: "import",
}
COMPACT_STATUS = {
    pb.COMPACT_STATUS_COMPACTED: "compacted",
    pb.COMPACT_STATUS_REJECTED: "rejected",
    pb.COMPACT_STATUS_FAILED: "failed",
}

Summary = str | Sequence[Mapping[str, Any]]
"""A compaction summary: text (one user message) or a list of ``{role, content}`` dicts."""


def message_to_pb(m: Mapping[str, Any]) -> pb.Message:
    return pb.Message(role=str(m["role"]), content_json=blocks_json(m["content"]))


def summary_to_pb(summary: Summary) -> list[pb.Message]:
    if isinstance(summary, str):
        return [pb.Message(role="user", content_json=blocks_json(summary))]
    return [message_to_pb(m) for m in summary]


def restore_request(
    run_id: str, checkpoint_id: str, *, checkpoint: bool, lease_id: str = ""
) -> pb.RestoreRequest:
    return pb.RestoreRequest(
        run_id=run_id,
        checkpoint_id=checkpoint_id,
        skip_checkpoint=not checkpoint,
        lease_id=lease_id,
    )


def compact_request(
    run_id: str,
    summary: Summary,
    *,
    keep_last: int,
    checkpoint: bool,
    label: str,
    lease_id: str = "",
) -> pb.CompactRequest:
    return pb.CompactRequest(
        run_id=run_id,
        summary=summary_to_pb(summary),
        keep_last=max(0, keep_last),
        skip_checkpoint=not checkpoint,
        checkpoint_label=label,
        lease_id=lease_id,
    )


def fork_request(
    run_id: str,
    checkpoint_id: str,
    new_run_id: str,
    labels: Mapping[str, str] | None,
    message_window: int = 0,
) -> pb.ForkRequest:
    return pb.ForkRequest(
        run_id=run_id,
        checkpoint_id=checkpoint_id,
        new_run_id=new_run_id,
        labels=dict(labels or {}),
        message_window=max(0, message_window),
    )


def checkpoint_meta_from_pb(m: pb.CheckpointMeta) -> CheckpointMeta:
    return CheckpointMeta(
        checkpoint_id=m.checkpoint_id,
        run_id=m.run_id,
        trigger=TRIGGERS.get(m.trigger, "unspecified"),
        label=m.label,
        seq=m.seq,
        message_count=m.message_count,
        created=m.created,
        model=m.model,
        hash=m.hash,
        cwd=m.cwd,
    )


def restore_from_pb(r: pb.RestoreResponse) -> RestoreResult:
    return RestoreResult(
        from_messages=r.from_messages,
        to_messages=r.to_messages,
        pre_restore_checkpoint_id=r.pre_restore_checkpoint_id,
        ack=ack_from_pb(r.ack),
        warnings=[LeaseWarning(w.code, w.message) for w in r.warnings],
    )


def compact_from_pb(r: pb.CompactResponse) -> CompactResult:
    compacted = r.status == pb.COMPACT_STATUS_COMPACTED
    return CompactResult(
        status=COMPACT_STATUS.get(r.status, "unspecified"),
        reason=r.reason,
        checkpoint_id=r.checkpoint_id,
        removed_range=(
            (r.removed_range.from_seq, r.removed_range.to_seq)
            if compacted and r.HasField("removed_range")
            else None
        ),
        ack=ack_from_pb(r.ack) if compacted and r.HasField("ack") else None,
    )


def history_request(
    run_id: str, offset: int, limit: int, stored: bool, at_seq: int = 0, at_time: str = ""
) -> pb.HistoryRequest:
    """A History request; a page by seq or time is of the stored view (the one they index)."""
    req = pb.HistoryRequest(run_id=run_id, offset=max(0, offset), limit=max(0, limit))
    if stored or at_seq or at_time:
        req.view = pb.HISTORY_VIEW_STATE
    req.at_seq, req.at_time = max(0, at_seq), at_time
    return req


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


def history_done(page: HistoryPage, asked: int) -> bool:
    """Whether ``iter_history`` is at the end (or the daemon would not move forward)."""
    return page.next_offset >= page.total or page.next_offset <= asked


def attachment_from_pb(r: pb.PutAttachmentResponse) -> AttachmentRef:
    block = json.loads(r.block_json) if r.block_json else {}
    return AttachmentRef(
        sha256=r.sha256,
        size=r.size,
        block=block if isinstance(block, dict) else {},
        existed=r.existed,
    )


# --- reconnect policy ------------------------------------------------------------------


def backoff(initial: float = 0.05, cap: float = 1.0) -> Iterator[float]:
    """Delays between reconnect attempts: doubling from ``initial`` up to ``cap``."""
    delay = initial
    while True:
        yield delay
        delay = min(cap, delay * 2)


HEALTH_CHECK = "/grpc.health.v1.Health/Check"
"""Probed (an empty HealthCheckRequest, raw bytes) with wait_for_ready to learn when the
daemon accepts calls again, without a connectivity-polling thread."""


def probe_says_ready(status: grpc.StatusCode | None) -> bool:
    """Any answer from the daemon, even UNIMPLEMENTED, means it is up."""
    return status not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def needs_reopen(err: errors.JournaldError) -> bool:
    """The lease is gone (daemon restarted or unreachable): reconnect and re-Open."""
    return isinstance(err, errors.DaemonUnavailable | errors.LeaseLost)


def retry_in_place(err: errors.JournaldError) -> bool:
    """The daemon is up and the lease held, but its backend is briefly unavailable."""
    return isinstance(err, errors.BackendUnavailable) and not isinstance(
        err, errors.DaemonUnavailable
    )


def locked_by_self(err: errors.JournaldError) -> bool:
    """A ``locked`` naming this very process: our abandoned lease is still being released."""
    return (
        isinstance(err, errors.Locked)
        and err.holder_pid == os.getpid()
        and err.holder_host in ("", socket.gethostname())
    )


def reopen_retryable(err: errors.JournaldError) -> bool:
    return needs_reopen(err) or retry_in_place(err) or locked_by_self(err)


def open_retryable(err: errors.JournaldError) -> bool:
    """What a fresh start/open/resume retries: a daemon restarting. Not a ``locked`` naming
    this process: only a writer reopening its own lease waits that out; for a fresh open it
    is another client of this process holding the run, and waiting would only delay the
    refusal by the reconnect timeout."""
    return needs_reopen(err) or retry_in_place(err)
