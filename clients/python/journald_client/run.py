"""The synchronous writer of one run: ``Run``, holding its lease (``client.Client`` opens it).

Its appends take consecutive seqs under a lock; an append that meets a lost lease or a
restarting daemon is driven through ``retry.send`` (re-open in resume mode, read what is
stored, resend the same bytes), so a record is never lost or written twice. The checkpoint
operations it does as the lease holder (restore, compact) move its seqs on past the rebase.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
from journald_proto import journal_pb2 as pb

from journald_client import codec, retry, window
from journald_client.codec import Entry, OpenParams, Summary
from journald_client.open_lease import RELEASE_TIMEOUT_S, Held, _Lease
from journald_client.pipelined import DEFAULT_WINDOW, PipelinedWriter
from journald_client.state import (
    Ack,
    CheckpointMeta,
    CompactResult,
    GovernedView,
    RestoreResult,
    RunState,
    ToolCall,
)

if TYPE_CHECKING:
    from journald_client.client import Client

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
