"""Request building and response decoding shared by ``Client`` and ``AsyncClient``.

Everything here is free of I/O: the two transports (``client.py``, ``aio.py``) only move the
messages built here and hand the answers back here to be decoded. This module holds the
records (``Entry``), the Open request and the writer view both transports share
(``RunView``), history paging and the reconnect policy; content blocks
(``content_blocks``), the decoding of answers (``response_decode``) and the checkpoint
operations (``checkpoint_codec``) have their own modules, re-exported here so that
``codec.X`` names them all.
"""

from __future__ import annotations

import hashlib
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
from journald_client.checkpoint_codec import COMPACT_STATUS as COMPACT_STATUS
from journald_client.checkpoint_codec import TRIGGERS as TRIGGERS
from journald_client.checkpoint_codec import Summary as Summary
from journald_client.checkpoint_codec import checkpoint_meta_from_pb as checkpoint_meta_from_pb
from journald_client.checkpoint_codec import compact_from_pb as compact_from_pb
from journald_client.checkpoint_codec import compact_request as compact_request
from journald_client.checkpoint_codec import fork_request as fork_request
from journald_client.checkpoint_codec import message_to_pb as message_to_pb
from journald_client.checkpoint_codec import restore_from_pb as restore_from_pb
from journald_client.checkpoint_codec import restore_request as restore_request
from journald_client.checkpoint_codec import summary_to_pb as summary_to_pb
from journald_client.content_blocks import RESULT_BLOCKS_TYPE as RESULT_BLOCKS_TYPE
from journald_client.content_blocks import RESULT_TEXT_TYPE as RESULT_TEXT_TYPE
from journald_client.content_blocks import _block as _block
from journald_client.content_blocks import _json_list as _json_list
from journald_client.content_blocks import blocks as blocks
from journald_client.content_blocks import blocks_json as blocks_json
from journald_client.content_blocks import result_attachment as result_attachment
from journald_client.fingerprint import Fingerprint, canonical_json
from journald_client.own_records import same_record as same_record  # the lost-ack compare
from journald_client.response_decode import _DURABILITY as _DURABILITY
from journald_client.response_decode import ack_from_pb as ack_from_pb
from journald_client.response_decode import acks_from_pb as acks_from_pb
from journald_client.response_decode import attachment_from_pb as attachment_from_pb
from journald_client.response_decode import governed_from_pb as governed_from_pb
from journald_client.response_decode import history_from_pb as history_from_pb
from journald_client.response_decode import message_from_pb as message_from_pb
from journald_client.response_decode import pending_from_pb as pending_from_pb
from journald_client.response_decode import record_from_pb as record_from_pb
from journald_client.response_decode import recover_from_pb as recover_from_pb
from journald_client.response_decode import run_info_from_pb as run_info_from_pb
from journald_client.response_decode import state_from_pb as state_from_pb
from journald_client.response_decode import verify_from_pb as verify_from_pb
from journald_client.state import HistoryPage, LeaseWarning, RunState, ToolCall, ToolOutput

TERMINAL_REASONS = ("completed", "suspended", "error", "budget", "max_iterations")


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


# --- history pages ---------------------------------------------------------------------


def history_request(
    run_id: str, offset: int, limit: int, stored: bool, at_seq: int = 0, at_time: str = ""
) -> pb.HistoryRequest:
    """A History request; a page by seq or time is of the stored view (the one they index)."""
    req = pb.HistoryRequest(run_id=run_id, offset=max(0, offset), limit=max(0, limit))
    if stored or at_seq or at_time:
        req.view = pb.HISTORY_VIEW_STATE
    req.at_seq, req.at_time = max(0, at_seq), at_time
    return req


def history_done(page: HistoryPage, asked: int) -> bool:
    """Whether ``iter_history`` is at the end (or the daemon would not move forward)."""
    return page.next_offset >= page.total or page.next_offset <= asked


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
