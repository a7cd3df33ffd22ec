"""The synchronous client: ``Client`` (reads, opens) and ``Run`` (the writer of one run).

    with Client() as jd, jd.start("run-1", fp, "hello") as run:
        run.assistant([...tool_use blocks...], stop_reason="tool_use")
        run.tool_result("toolu_1", "42")
        run.terminal("completed")

The lease lives exactly as long as the ``Open`` stream, which a background thread keeps
alive; ``Run.close()`` (or leaving the ``with`` block) cancels it and the daemon releases
the lease at once. When the daemon goes away mid-run, an append reconnects with bounded
backoff, re-opens the run in resume mode with the same fingerprint, and resends the same
record at the same seq with the same bytes (the daemon answers ``duplicate`` if it had
already stored it), so a record is never lost or written twice.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import grpc
from journald_proto import journal_pb2 as pb
from journald_proto import journal_pb2_grpc as pb_grpc

from journald_client import checkpoint_transfer as transfer
from journald_client import codec, errors, retry, window
from journald_client.codec import Entry, OpenParams, Summary
from journald_client.list_changes import ListChanges
from journald_client.opening import Opener, Opening
from journald_client.paths import checked_target
from journald_client.pipelined import DEFAULT_WINDOW, PipelinedWriter
from journald_client.state import (
    Ack,
    AttachmentRef,
    CheckpointChange,
    CheckpointMeta,
    CompactResult,
    GovernedView,
    HistoryPage,
    JournalRecord,
    Message,
    RecoverResult,
    RestoreResult,
    RunInfo,
    RunState,
    ToolCall,
    VerifyResult,
)

if TYPE_CHECKING:
    from journald_client.lease_set import LeaseSet

# Reconnect quickly after a daemon restart. grpc.min_reconnect_backoff_ms is deliberately
# left alone: gRPC also uses it as the minimum connect timeout, and a tiny one fails
# connection attempts on a loaded host.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Default max gRPC message size (both ways), equal to the daemon's default
(``--max-message-bytes``)."""

RELEASE_TIMEOUT_S = 2.0
"""How long ``close()`` waits for ``Release`` before cancelling the stream anyway."""


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [
        ("grpc.initial_reconnect_backoff_ms", 50),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


CHANNEL_OPTIONS = channel_options()


def default_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


class Held(Protocol):
    """What a writer keeps of its lease: the grant, why it ended, and how to end it (an
    ``Open`` stream's ``_Lease``, or one lease of a ``LeaseSet``'s stream)."""

    lease: pb.Lease
    ended: str | None
    done: threading.Event

    def cancel(self) -> None: ...


class _Lease:
    """One granted lease: the live ``Open`` call, kept alive by a daemon thread."""

    def __init__(self, call: Any, lease: pb.Lease) -> None:
        self.call = call
        self.lease = lease
        self.ended: str | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(
            target=self._drain, name=f"journald-lease-{lease.run_id}", daemon=True
        )
        self._thread.start()

    def _drain(self) -> None:
        try:
            for msg in self.call:
                if msg.HasField("ended"):
                    self.ended = msg.ended.reason or "ended"
        except grpc.RpcError:
            pass
        finally:
            if self.ended is None:
                self.ended = "stream_closed"
            self.done.set()

    def cancel(self) -> None:
        self.call.cancel()
        self._thread.join(timeout=5)


class Client(Opener):
    """A connection to the journald daemon (no disk access: the daemon owns the files)."""

    def __init__(
        self,
        socket: str | None = None,
        *,
        name: str | None = None,
        reconnect_timeout: float = 30.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        message_window: int = window.MESSAGE_WINDOW,
        daemon_uid: int | str | None = None,
    ) -> None:
        # who owns the socket is checked before anything is dialed (UntrustedSocket);
        # daemon_uid: the uid the daemon runs as (default $JOURNALD_DAEMON_UID, else ours)
        self.target = checked_target(socket, daemon_uid)
        self.name = name or default_name()
        self.reconnect_timeout = reconnect_timeout
        self.message_window = max(0, message_window)
        """Messages an Open or Fold asks for (the newest; 0 = all in one answer); the
        earlier ones are paged through History when ``messages`` is first read."""
        self._channel = grpc.insecure_channel(
            self.target, options=channel_options(max_message_bytes)
        )
        self._stub = pb_grpc.JournalServiceStub(self._channel)
        self._runs: list[Run] = []
        self._lease_sets: list[LeaseSet] = []
        self._closed = False

    # --- plumbing ----------------------------------------------------------------------

    def _error(self, exc: grpc.RpcError) -> errors.JournaldError:
        return errors.from_rpc_error(exc, self.target)

    def _unary(self, method: str, request: Any) -> Any:
        fn = getattr(self._stub, method)
        try:
            return fn(request, metadata=codec.metadata())
        except grpc.RpcError as exc:
            raise self._error(exc) from None

    def _ready(self, timeout: float) -> bool:
        """Whether the daemon answers within ``timeout`` (waiting for it to come up)."""
        probe = self._channel.unary_unary(codec.HEALTH_CHECK, None, None)
        try:
            probe(b"", timeout=max(timeout, 0.001), wait_for_ready=True)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            return codec.probe_says_ready(code)
        return True

    def wait_ready(self, timeout: float = 5.0) -> None:
        """Block until the daemon answers, or raise ``DaemonUnavailable``."""
        if not self._ready(timeout):
            raise errors.unreachable(self.target, f"no answer within {timeout:g}s")

    def _open(
        self,
        params: OpenParams,
        *,
        create: bool | None,
        prompt: str | Sequence[Mapping[str, Any]] = (),
        labels: Mapping[str, str] | None = None,
    ) -> _Lease:
        req = codec.open_request(params, create=create, prompt=prompt, labels=labels)
        return self._open_req(params, req)

    def _open_req(self, params: OpenParams, req: pb.OpenRequest) -> _Lease:
        req.message_window = self.message_window
        call: Any = self._stub.Open(req, metadata=codec.metadata())
        try:
            first = next(call)
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        except StopIteration:
            raise errors.LeaseLost(
                f"the daemon closed the Open stream of run {params.run_id} without a lease"
            ) from None
        if not first.HasField("lease"):
            call.cancel()
            raise errors.LeaseLost(
                f"the daemon ended the lease of run {params.run_id} at once "
                f"({first.ended.reason}: {first.ended.message})"
            )
        return _Lease(call, first.lease)

    def _open_retrying(
        self,
        params: OpenParams,
        req: pb.OpenRequest,
        open_req: Callable[[OpenParams, pb.OpenRequest], Held] | None = None,
    ) -> tuple[Held, bool]:
        """Open (through ``open_req``: an ``Open`` stream by default), retrying while the
        daemon restarts (``retry.open_run``). Returns the lease and whether this call created
        the run."""
        opener = open_req or self._open_req

        def do(step: retry.Step) -> Any:
            if isinstance(step, retry.OpenCall):
                return opener(params, step.request)
            if isinstance(step, retry.CreatedBy):
                return self._created_by(step.request)
            return self._wait_step(step)

        lease: tuple[Held, bool] = retry.drive(retry.open_run(req, self.reconnect_timeout), do)
        return lease

    def _wait_step(self, step: retry.Step) -> Any:
        """The steps that only wait: ``Sleep`` and ``Probe``."""
        if isinstance(step, retry.Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, retry.Probe):
            return self._ready(step.timeout_s)
        raise TypeError(f"unexpected retry step {step!r}")  # pragma: no cover - a bug

    def _created_by(self, req: pb.OpenRequest) -> bool:
        try:
            meta = next(iter(self.load(req.run_id)), None)
        except errors.JournaldError:
            return False
        return meta is not None and codec.created_by(req, meta.payload)

    # --- writers -----------------------------------------------------------------------

    @property
    def _writer_name(self) -> str:
        return self.name

    def _opened(self, opening: Opening) -> Run:
        lease, created = self._open_retrying(opening.params, opening.request)
        run = Run(self, opening.params, lease, created=created if opening.fresh else None)
        return self._track(run)

    def _track(self, run: Run) -> Run:
        self._runs = [r for r in self._runs if not r.closed] + [run]
        return run

    def lease_set(self) -> LeaseSet:
        """Many runs' leases over one ``Leases`` stream (``journald_client.lease_set``): for a
        process that holds many runs at once; its ``start``/``open``/``resume`` are this
        client's. Use it as a ``with`` block."""
        from journald_client.lease_set import LeaseSet

        leases = LeaseSet(self)
        self._lease_sets = [s for s in self._lease_sets if not s.closed] + [leases]
        return leases

    # --- reads -------------------------------------------------------------------------

    def fold(self, run_id: str, *, messages: bool = True) -> RunState:
        """The run's folded state; ``messages`` beyond the window are paged in when first
        read. ``messages=False``: without the committed messages, a small answer for a long
        run (page those with ``history``)."""
        if not messages:
            resp = self._unary("Fold", pb.FoldRequest(run_id=run_id, omit_messages=True))
            return codec.state_from_pb(resp.state)
        req = pb.FoldRequest(run_id=run_id, message_window=self.message_window)
        return self._state(run_id, self._unary("Fold", req).state)

    def governed_messages(self, run_id: str) -> GovernedView:
        """The pairing-governed (sendable) message view and what governance changed."""
        req = pb.FoldRequest(run_id=run_id, governed=True, message_window=self.message_window)
        resp = self._unary("Fold", req)
        view = codec.governed_from_pb(resp)
        state = self._state(run_id, resp.state)
        plan = window.earlier_for(
            run_id, pb.HISTORY_VIEW_GOVERNED, resp.governed_messages, resp.governed_offset
        )
        if plan is None:
            return window.replace(view, state=state)
        return window.lazily(view, self._fetcher(plan), state=state)

    def _state(self, run_id: str, st: pb.RunState, warnings: Sequence[pb.Warning] = ()) -> RunState:
        """Decode a state; messages before its window are fetched when first read."""
        state = codec.state_from_pb(st, warnings)
        plan = window.earlier_for(run_id, pb.HISTORY_VIEW_STATE, st.messages, st.messages_offset)
        return state if plan is None else window.lazily(state, self._fetcher(plan))

    def _fetcher(self, plan: window.Earlier) -> Callable[[], builtins.list[Message]]:
        def fetch() -> builtins.list[Message]:
            if not self._closed:
                return self._earlier(plan)
            with Client(self.target, name=self.name) as again:  # read after close()
                return again._earlier(plan)

        return fetch

    def _earlier(self, plan: window.Earlier) -> builtins.list[Message]:
        """The messages before a window, paged through History."""
        while (req := plan.request()) is not None:
            try:
                page = self._unary("History", req)
            except errors.ResponseTooLarge as err:
                plan.too_large(err)
                continue
            plan.add(page)
        return [codec.message_from_pb(m) for m in plan.messages]

    def load(self, run_id: str, from_seq: int = 1) -> Generator[JournalRecord, None, None]:
        """The run's stored records from ``from_seq`` (exact canonical bytes included),
        streamed as the daemon reads them: a long run is never held in memory whole. Errors
        (``session_not_found``) surface on the first ``next``; stop early with ``close()``."""
        call: Any = self._stub.Load(
            pb.LoadRequest(run_id=run_id, from_seq=from_seq), metadata=codec.metadata()
        )
        try:
            for m in call:
                yield codec.record_from_pb(m.record)
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        finally:
            call.cancel()

    def list(self, limit: int = 0) -> list[RunInfo]:
        """The runs the daemon holds, newest first."""
        resp = self._unary("List", pb.ListRequest(limit=limit))
        return [codec.run_info_from_pb(r) for r in resp.runs]

    def list_changes(self) -> ListChanges:
        """Notices of which runs' listing rows changed (the first says the stream is live:
        List after it); ``cancel()`` to stop. A daemon older than ListChanges fails the
        iteration with a ``JournaldError`` of code ``unimplemented``: poll ``list`` then."""
        call = self._stub.ListChanges(pb.ListChangesRequest(), metadata=codec.metadata())
        return ListChanges(call, self._error)

    def delete(self, run_id: str) -> bool:
        """Remove a run (idempotent): False when it did not exist."""
        return bool(self._unary("Delete", pb.DeleteRequest(run_id=run_id)).deleted)

    def verify(self, run_id: str) -> VerifyResult:
        """Check the run's hash chain and schemas end to end (``store_corrupted`` if not)."""
        return codec.verify_from_pb(self._unary("Verify", pb.VerifyRequest(run_id=run_id)))

    def recover(self, run_id: str) -> RecoverResult:
        """Move the run's damaged records to the daemon's quarantine directory and record the
        hole in the run (``locked`` while a writer holds it; ``unsupported`` on JetStream)."""
        resp = self._unary("Recover", pb.RecoverRequest(run_id=run_id))
        return codec.recover_from_pb(run_id, resp)

    def watch(self, run_id: str, from_seq: int = 1) -> Watch:
        """A live tail of the run's records from ``from_seq``; ``cancel()`` to stop."""
        call = self._stub.Watch(
            pb.WatchRequest(run_id=run_id, from_seq=from_seq), metadata=codec.metadata()
        )
        return Watch(self, call)

    # --- checkpoints (docs/design.md#checkpoints) -------------------------------------

    def checkpoint(self, run_id: str, label: str = "") -> CheckpointMeta:
        """Take a checkpoint of the run's folded conversation (``turn_running`` while a
        turn has unanswered tool calls)."""
        resp = self._unary("Checkpoint", pb.CheckpointRequest(run_id=run_id, label=label))
        return codec.checkpoint_meta_from_pb(resp.checkpoint)

    def checkpoints(self, run_id: str) -> builtins.list[CheckpointMeta]:
        """The run's checkpoints, oldest first."""
        resp = self._unary("ListCheckpoints", pb.ListCheckpointsRequest(run_id=run_id))
        return [codec.checkpoint_meta_from_pb(m) for m in resp.checkpoints]

    def delete_checkpoint(self, run_id: str, checkpoint_id: str) -> bool:
        """Remove a checkpoint (idempotent): False when it did not exist."""
        req = pb.DeleteCheckpointRequest(run_id=run_id, checkpoint_id=checkpoint_id)
        return bool(self._unary("DeleteCheckpoint", req).deleted)

    def restore(self, run_id: str, checkpoint_id: str, *, checkpoint: bool = True) -> RestoreResult:
        """Replace the run's conversation by a checkpoint's (a rebase record), first taking
        a pre_restore checkpoint unless ``checkpoint=False``. A run held by a writer answers
        ``locked``: its holder calls ``Run.restore``."""
        req = codec.restore_request(run_id, checkpoint_id, checkpoint=checkpoint)
        return codec.restore_from_pb(self._unary("Restore", req))

    def compact(
        self,
        run_id: str,
        summary: Summary,
        *,
        keep_last: int = 0,
        checkpoint: bool = True,
        label: str = "",
    ) -> CompactResult:
        """Fold the conversation prefix into ``summary`` (text, or ``{role, content}``
        dicts starting with a user message), keeping about ``keep_last`` trailing messages.
        A refusal is ``status == "rejected"`` (nothing written), not an exception."""
        req = codec.compact_request(
            run_id, summary, keep_last=keep_last, checkpoint=checkpoint, label=label
        )
        return codec.compact_from_pb(self._unary("Compact", req))

    def fork(
        self,
        run_id: str,
        *,
        checkpoint_id: str = "",
        new_run_id: str = "",
        labels: Mapping[str, str] | None = None,
        message_window: int = 0,
    ) -> tuple[str, RunState]:
        """Start a new run from a checkpoint (or the head); returns its id and state.

        ``message_window`` 0: the state holds every message (the daemon answers a window,
        the earlier messages are paged through History when first read, as for
        ``fold``); more: only the newest that many (from a clean tool-call boundary, or
        fewer if they would not fit in the daemon's max message size)."""
        req = codec.fork_request(
            run_id, checkpoint_id, new_run_id, labels, message_window or self.message_window
        )
        resp = self._unary("Fork", req)
        if message_window > 0:
            return resp.run_id, codec.state_from_pb(resp.state)
        return resp.run_id, self._state(resp.run_id, resp.state)

    def export_checkpoint(self, run_id: str, checkpoint_id: str) -> bytes:
        """Self-contained ``journald-checkpoint/1`` bytes (attachments included), of any
        size (sent in chunks: journald_client.checkpoint_transfer)."""
        return transfer.export_bytes(self._stub, self._error, run_id, checkpoint_id)

    def export_checkpoint_to(self, run_id: str, checkpoint_id: str, out: BinaryIO) -> int:
        """Write the export to ``out`` chunk by chunk (never held whole); its size. A
        failure midway leaves a partial file: not an export, discard it."""
        return transfer.export_to(self._stub, self._error, run_id, checkpoint_id, out.write)

    def import_checkpoint(self, run_id: str, data: bytes) -> CheckpointMeta:
        """Verify exported bytes completely, then store them as a new checkpoint of
        ``run_id`` (``checkpoint_import_invalid`` if anything is off)."""
        pieces = transfer.bytes_pieces(data)
        return transfer.import_pieces(self._stub, self._error, run_id, pieces, lambda: data)

    def import_checkpoint_from(self, run_id: str, source: BinaryIO) -> CheckpointMeta:
        """``import_checkpoint`` of the export read from ``source`` chunk by chunk."""
        return transfer.import_file(self._stub, self._error, run_id, source)

    def history(
        self,
        run_id: str,
        offset: int = 0,
        limit: int = 50,
        *,
        stored: bool = False,
        at_seq: int = 0,
        at_time: str = "",
    ) -> HistoryPage:
        """One self-paired page of the folded conversation (``limit=0``: only the total).

        ``stored=False`` pages the sendable view (cleaned up; the daemon folds the run once and
        keeps it while the run is idle); ``stored=True`` pages the messages exactly as the fold
        holds them (what an Open's state holds), served from the run's last segments, so its
        cost grows with the distance from the end, not with the run's length.

        ``at_seq`` or ``at_time`` (RFC 3339 with a zone) page the stored view from the message
        the record at that seq (or the first at or after that time) folded into, instead of
        ``offset``; the page's ``at_index`` and ``at_seq`` say which message and record."""
        req = codec.history_request(run_id, offset, limit, stored, at_seq, at_time)
        return codec.history_from_pb(self._unary("History", req))

    def iter_history(self, run_id: str, page: int = 50) -> Iterator[Message]:
        """Every message of the conversation once, fetched ``page`` at a time."""
        offset = 0
        while True:
            got = self.history(run_id, offset, max(1, page))
            yield from got.messages
            if codec.history_done(got, offset):
                return
            offset = got.next_offset

    def put_attachment(
        self, run_id: str, data: bytes, media_type: str, name: str = ""
    ) -> AttachmentRef:
        """Store bytes once per run (content-addressed); put ``.block`` in a record."""
        req = pb.PutAttachmentRequest(run_id=run_id, data=data, media_type=media_type, name=name)
        return codec.attachment_from_pb(self._unary("PutAttachment", req))

    def get_attachment(self, run_id: str, sha256: str) -> bytes:
        """An attachment's bytes (``attachment_not_found`` if the run has none such)."""
        req = pb.GetAttachmentRequest(run_id=run_id, sha256=sha256)
        return bytes(self._unary("GetAttachment", req).data)

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for leases in self._lease_sets:
            leases.close()
        for run in self._runs:
            run.close()
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(
    socket: str | None = None,
    *,
    name: str | None = None,
    timeout: float = 5.0,
    reconnect_timeout: float = 30.0,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    message_window: int = window.MESSAGE_WINDOW,
    daemon_uid: int | str | None = None,
) -> Client:
    """A client whose daemon has answered (``DaemonUnavailable`` with a hint otherwise).
    ``max_message_bytes`` caps a gRPC message both ways (default 16 MiB);
    ``message_window`` is how many of the newest messages an Open or Fold brings (the rest
    are paged through History when ``state.messages`` is first read; 0 = all at once)."""
    client = Client(
        socket,
        name=name,
        reconnect_timeout=reconnect_timeout,
        max_message_bytes=max_message_bytes,
        message_window=message_window,
        daemon_uid=daemon_uid,
    )
    try:
        client.wait_ready(timeout)
    except BaseException:
        client.close()
        raise
    return client


class Watch:
    """A live tail: iterate for records (``events()``: records and checkpoint changes, in
    the order they happened); ``cancel()`` (or leave the ``with``) to stop."""

    def __init__(self, client: Client, call: Any) -> None:
        self._client = client
        self._call = call

    def __iter__(self) -> Iterator[JournalRecord]:
        for event in self.events():
            if isinstance(event, JournalRecord):
                yield event

    def events(self) -> Iterator[JournalRecord | CheckpointChange]:
        try:
            for msg in self._call:
                if msg.HasField("record"):
                    yield codec.record_from_pb(msg.record)
                elif msg.HasField("checkpoint"):
                    meta = codec.checkpoint_meta_from_pb(msg.checkpoint.checkpoint)
                    yield CheckpointChange(msg.checkpoint.kind, meta)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._client._error(exc) from None

    def cancel(self) -> None:
        self._call.cancel()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


ToolFn = Callable[[ToolCall], Any]


class Run(codec.RunView):
    """The writer of one run, holding its lease. Seq is handled for the caller."""

    _lease: Held

    def __init__(
        self,
        client: Client,
        params: OpenParams,
        lease: Held,
        *,
        created: bool | None = None,
        reopen: Callable[[OpenParams], Held] | None = None,
    ) -> None:
        self._client = client
        self._params = params
        self._reopen = reopen or (lambda p: client._open(p, create=False))
        """How a lost lease is taken again (an ``Open``, or the ``LeaseSet``'s stream)."""
        self._lock = threading.RLock()
        self._init_view(params, lease)
        if created is not None:
            self.created = created

    def _decode_state(self, st: pb.RunState, warnings: Sequence[pb.Warning]) -> RunState:
        return self._client._state(self.run_id, st, warnings)

    # --- appends -----------------------------------------------------------------------

    def assistant(
        self,
        content: str | Sequence[Mapping[str, Any]],
        *,
        stop_reason: str,
        usage: Mapping[str, int] | None = None,
        iteration: int | None = None,
    ) -> Ack:
        """Journal a model call (before any of its tools run); numbered ``next_iteration``
        unless ``iteration`` is given."""
        entry = Entry.assistant(content, stop_reason=stop_reason, iteration=iteration, usage=usage)
        return self.append_many([entry])[0]

    def tool_result(
        self,
        tool_use_id: str,
        content: str | Sequence[Mapping[str, Any]],
        *,
        is_error: bool = False,
        remote: bool = False,
        as_attachment: bool = False,
    ) -> Ack:
        """Journal one tool's result as it completes. ``as_attachment``: store the content
        as an attachment of the run first (text as UTF-8, blocks as JSON) and journal the
        result as that attachment's block, so output of any size up to the attachment limit
        (8 MiB) stays out of the record (docs/protocol.md#large-tool-results)."""
        if as_attachment:
            data, media_type = codec.result_attachment(content)
            ref = self._client.put_attachment(self.run_id, data, media_type, tool_use_id)
            content = [ref.block]
        entry = Entry.tool_result(tool_use_id, content, is_error=is_error, remote=remote)
        return self.append_many([entry])[0]

    def user(self, content: str | Sequence[Mapping[str, Any]]) -> Ack:
        """Journal an interactive follow-up (only the newly typed blocks)."""
        return self.append_many([Entry.user(content)])[0]

    def terminal(self, reason: str, message: str = "") -> Ack:
        """Journal the end of the run (completed, suspended, error, budget, max_iterations)."""
        return self.append_many([Entry.terminal(reason, message)])[0]

    def append_many(self, entries: Sequence[Entry]) -> list[Ack]:
        """Append a batch (one durable write) at consecutive seqs."""
        if not entries:
            return []
        with self._lock:
            self._check_unary()
            records = codec.stamp(entries, self.last_seq + 1, self.next_iteration)
            acks = self._send(records)
            self.last_seq = acks[-1].seq
            self._appended(records)
            return acks

    def _send(self, records: list[pb.Record]) -> list[Ack]:
        def do(step: retry.Step) -> Any:
            if isinstance(step, retry.Call):
                req = pb.AppendRequest(run_id=self.run_id, lease_id=self.lease_id, records=records)
                try:
                    resp = self._client._stub.Append(req, metadata=codec.metadata())
                except grpc.RpcError as exc:
                    raise self._client._error(exc) from None
                return codec.acks_from_pb(resp, records)
            return self._recovery_step(step)

        acks: list[Ack] = retry.drive(
            retry.send(self._retry_writer(), records, self._client.reconnect_timeout), do
        )
        return acks

    def _retry_writer(self) -> retry.Writer:
        return retry.Writer(self.run_id, self._client.target, lambda: self.closed)

    def _recovery_step(self, step: retry.Step) -> Any:
        """Do a step of ``retry.recover``: re-open the lease, read what is stored, wait."""
        if isinstance(step, retry.CancelLease):
            self._lease.cancel()
            return None
        if isinstance(step, retry.Reopen):
            lease = self._reopen(self._params)
            self._lease = lease
            self.reconnects += 1
            self._state_changed(self._decode_state(lease.lease.state, lease.lease.warnings))
            return lease.lease.last_seq
        if isinstance(step, retry.Load):
            req = pb.LoadRequest(run_id=self.run_id, from_seq=step.from_seq)
            try:
                return [m.record for m in self._client._stub.Load(req, metadata=codec.metadata())]
            except grpc.RpcError:
                return None
        return self._client._wait_step(step)

    # --- reads and recovery ------------------------------------------------------------

    def fold(self) -> RunState:
        """The run's current folded state."""
        return self._client.fold(self.run_id)

    def governed_messages(self) -> GovernedView:
        """The pairing-governed message view (every tool call paired) and its report."""
        return self._client.governed_messages(self.run_id)

    def complete_pending(
        self,
        run_tool: ToolFn,
        *,
        remote: bool = False,
        on_result: Callable[[ToolCall, Ack], None] | None = None,
    ) -> list[Ack]:
        """Run only the still-unanswered calls of the pending turn (``open_calls``: the ones
        the lease reported, less those answered since; no extra round trip), journaling each
        result as it completes; a tool that raises becomes an ``is_error`` result.
        ``on_result`` is called after each result is durable."""
        acks = []
        for call in self.open_calls:
            try:
                outcome: Any = run_tool(call)
            except Exception as exc:
                outcome = exc
            ack = self.append_many([codec.tool_entry(call, outcome, remote=remote)])[0]
            acks.append(ack)
            if on_result is not None:
                on_result(call, ack)
        return acks

    # --- checkpoints under the lease ----------------------------------------------------

    def checkpoint(self, label: str = "") -> CheckpointMeta:
        """Take a checkpoint of this run (ordered after this writer's appends)."""
        with self._lock:
            return self._client.checkpoint(self.run_id, label)

    def restore(self, checkpoint_id: str, *, checkpoint: bool = True) -> RestoreResult:
        """``Client.restore`` as the lease holder: the rebase takes the next seq, and this
        writer's next append follows it; ``state`` is refreshed."""
        with self._lock:
            self._check_unary()
            req = codec.restore_request(
                self.run_id, checkpoint_id, checkpoint=checkpoint, lease_id=self.lease_id
            )
            result = codec.restore_from_pb(self._client._unary("Restore", req))
            self._rebased(result.ack)
            return result

    def compact(
        self,
        summary: Summary,
        *,
        keep_last: int = 0,
        checkpoint: bool = True,
        label: str = "",
    ) -> CompactResult:
        """``Client.compact`` as the lease holder: when compacted, the rebase takes the next
        seq, and this writer's next append follows it; ``state`` is refreshed."""
        with self._lock:
            self._check_unary()
            req = codec.compact_request(
                self.run_id,
                summary,
                keep_last=keep_last,
                checkpoint=checkpoint,
                label=label,
                lease_id=self.lease_id,
            )
            result = codec.compact_from_pb(self._client._unary("Compact", req))
            if result.ack is not None:
                self._rebased(result.ack)
            return result

    def pipelined(self, window: int = DEFAULT_WINDOW) -> PipelinedWriter:
        """A writer that keeps up to ``window`` appends in flight on one stream, each with
        its own ack (``journald_client.pipelined``); use it as a ``with`` block. While it is
        open, append through it only."""
        with self._lock:
            self._check_unary()
            writer = PipelinedWriter(self, window)
            self._pipelined = writer
            return writer

    def _rebased(self, ack: Ack) -> None:
        """After a rebase appended under our lease at ``ack.seq`` (caller holds the lock)."""
        self.last_seq = max(self.last_seq, ack.seq)
        self._state_changed(
            window.replace(self._client.fold(self.run_id), warnings=self.state.warnings)
        )
        self.next_iteration = max(self.next_iteration, self.state.next_iteration)

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def lease_ended(self) -> str | None:
        """Why the lease stream ended (``shutdown``, ``deleted``, ...), or None while held."""
        return self._lease.ended if self._lease.done.is_set() else None

    def close(self) -> None:
        """Release the lease: ``Release`` (so a re-open right after never sees ``locked``),
        then cancel the Open stream; a reconnect in progress gives up."""
        if self.closed:
            return
        self.closed = True
        if isinstance(self._lease, _Lease):  # a LeaseSet's lease is released on its stream
            self._release()
        self._lease.cancel()

    def _release(self) -> None:
        if self._lease.done.is_set():
            return
        req = pb.ReleaseRequest(run_id=self.run_id, lease_id=self.lease_id)
        # the daemon may be gone or too old to know Release: cancelling the stream still
        # releases the lease, only asynchronously
        with contextlib.suppress(grpc.RpcError):
            self._client._stub.Release(req, timeout=RELEASE_TIMEOUT_S, metadata=codec.metadata())

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
