"""The synchronous client: ``Client`` (reads, opens) and ``Run`` (the writer of one run,
in ``journald_client.run``; the lease it holds is ``journald_client.open_lease``'s).

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
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

import grpc
from journald_proto import journal_pb2 as pb
from journald_proto import journal_pb2_grpc as pb_grpc

from journald_client import checkpoint_transfer as transfer
from journald_client import codec, errors, retry, window
from journald_client.codec import OpenParams, Summary
from journald_client.list_changes import ListChanges
from journald_client.open_lease import RELEASE_TIMEOUT_S as RELEASE_TIMEOUT_S
from journald_client.open_lease import Held as Held
from journald_client.open_lease import _Lease as _Lease
from journald_client.opening import Opener, Opening
from journald_client.paths import checked_target
from journald_client.run import Run as Run
from journald_client.run import ToolFn as ToolFn
from journald_client.state import (
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
