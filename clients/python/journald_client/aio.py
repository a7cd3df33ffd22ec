"""The asyncio client: ``AsyncClient`` and ``AsyncRun``, the same API as the sync one.

Requests are built and answers decoded by ``journald_client.codec`` (shared with the sync
client); this module only moves them over ``grpc.aio``. The lease stream is kept alive by a
task (``open_lease._AsyncLease``) and cancelled on ``close()``; the writer, ``AsyncRun``, is
``journald_client.aio_run``'s.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

import grpc
import grpc.aio
from journald_proto import journal_pb2 as pb
from journald_proto import journal_pb2_grpc as pb_grpc

from journald_client import checkpoint_transfer as transfer
from journald_client import codec, errors, retry, window
from journald_client.aio_run import AsyncRun as AsyncRun
from journald_client.aio_run import AsyncToolFn as AsyncToolFn
from journald_client.client import (
    MAX_MESSAGE_BYTES,
    channel_options,
    default_name,
)
from journald_client.codec import OpenParams, Summary
from journald_client.open_lease import EOF as EOF
from journald_client.open_lease import AsyncHeld as AsyncHeld
from journald_client.open_lease import _AsyncLease as _AsyncLease
from journald_client.opening import AsyncOpener, Opening
from journald_client.paths import checked_target
from journald_client.state import (
    AttachmentRef,
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
    from journald_client.aio_lease_set import AsyncLeaseSet


class AsyncClient(AsyncOpener):
    """An asyncio connection to the journald daemon."""

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
        earlier ones are paged through History before the state is returned."""
        self._channel = grpc.aio.insecure_channel(
            self.target, options=channel_options(max_message_bytes)
        )
        self._stub = pb_grpc.JournalServiceStub(self._channel)
        self._runs: list[AsyncRun] = []
        self._lease_sets: list[AsyncLeaseSet] = []
        self._closed = False

    def _error(self, exc: grpc.RpcError) -> errors.JournaldError:
        return errors.from_rpc_error(exc, self.target)

    async def _unary(self, method: str, request: Any) -> Any:
        fn = getattr(self._stub, method)
        try:
            return await fn(request, metadata=codec.metadata())
        except grpc.RpcError as exc:
            raise self._error(exc) from None

    async def _ready(self, wait: float) -> bool:
        """Whether the daemon answers within ``wait`` seconds (waiting for it to come up)."""
        probe = self._channel.unary_unary(codec.HEALTH_CHECK, None, None)
        try:
            await probe(b"", timeout=max(wait, 0.001), wait_for_ready=True)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            return codec.probe_says_ready(code)
        return True

    async def wait_ready(self, wait: float = 5.0) -> None:
        """Wait until the daemon answers, or raise ``DaemonUnavailable``."""
        if not await self._ready(wait):
            raise errors.unreachable(self.target, f"no answer within {wait:g}s")

    async def _open(
        self,
        params: OpenParams,
        *,
        create: bool | None,
        prompt: str | Sequence[Mapping[str, Any]] = (),
        labels: Mapping[str, str] | None = None,
    ) -> _AsyncLease:
        req = codec.open_request(params, create=create, prompt=prompt, labels=labels)
        return await self._open_req(params, req)

    async def _open_req(self, params: OpenParams, req: pb.OpenRequest) -> _AsyncLease:
        req.message_window = self.message_window
        call: Any = self._stub.Open(req, metadata=codec.metadata())
        try:
            first = await call.read()
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        if first is EOF:
            raise errors.LeaseLost(
                f"the daemon closed the Open stream of run {params.run_id} without a lease"
            )
        if not first.HasField("lease"):
            call.cancel()
            raise errors.LeaseLost(
                f"the daemon ended the lease of run {params.run_id} at once "
                f"({first.ended.reason}: {first.ended.message})"
            )
        try:
            await self._complete(params.run_id, first.lease.state)
        except BaseException:
            call.cancel()
            raise
        return _AsyncLease(call, first.lease)

    async def _open_retrying(
        self,
        params: OpenParams,
        req: pb.OpenRequest,
        open_req: Callable[[OpenParams, pb.OpenRequest], Awaitable[AsyncHeld]] | None = None,
    ) -> tuple[AsyncHeld, bool]:
        """``Client._open_retrying`` for asyncio (the same ``retry.open_run``)."""
        opener = open_req or self._open_req

        async def do(step: retry.Step) -> Any:
            if isinstance(step, retry.OpenCall):
                return await opener(params, step.request)
            if isinstance(step, retry.CreatedBy):
                return await self._created_by(step.request)
            return await self._wait_step(step)

        steps = retry.open_run(req, self.reconnect_timeout)
        lease: tuple[AsyncHeld, bool] = await retry.drive_async(steps, do)
        return lease

    async def _wait_step(self, step: retry.Step) -> Any:
        """The steps that only wait: ``Sleep`` and ``Probe``."""
        if isinstance(step, retry.Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, retry.Probe):
            return await self._ready(step.timeout_s)
        raise TypeError(f"unexpected retry step {step!r}")  # pragma: no cover - a bug

    async def _created_by(self, req: pb.OpenRequest) -> bool:
        try:
            async for meta in self.load(req.run_id):
                return codec.created_by(req, meta.payload)
        except errors.JournaldError:
            return False
        return False

    async def _earlier(self, plan: window.Earlier | None) -> builtins.list[pb.Message]:
        """The messages before a window, paged through History."""
        while plan is not None and (req := plan.request()) is not None:
            try:
                page = await self._unary("History", req)
            except errors.ResponseTooLarge as err:
                plan.too_large(err)
                continue
            plan.add(page)
        return plan.messages if plan is not None else []

    async def _complete(self, run_id: str, st: pb.RunState) -> None:
        """Put the messages before the state's window in front of it (attribute reads
        cannot await, so the asyncio client fetches them before returning the state)."""
        plan = window.earlier_for(run_id, pb.HISTORY_VIEW_STATE, st.messages, st.messages_offset)
        if plan is not None:
            window.splice(st.messages, await self._earlier(plan))
            st.messages_offset = 0

    @property
    def _writer_name(self) -> str:
        return self.name

    async def _opened(self, opening: Opening) -> AsyncRun:
        lease, created = await self._open_retrying(opening.params, opening.request)
        run = AsyncRun(self, opening.params, lease, created=created if opening.fresh else None)
        return self._track(run)

    def _track(self, run: AsyncRun) -> AsyncRun:
        self._runs = [r for r in self._runs if not r.closed] + [run]
        return run

    def lease_set(self) -> AsyncLeaseSet:
        """``Client.lease_set`` for asyncio (``journald_client.aio_lease_set``); use it as an
        ``async with`` block."""
        from journald_client.aio_lease_set import AsyncLeaseSet

        leases = AsyncLeaseSet(self)
        self._lease_sets = [s for s in self._lease_sets if not s.closed] + [leases]
        return leases

    async def fold(self, run_id: str, *, messages: bool = True) -> RunState:
        """The run's folded state, every message included (``messages=False``: without the
        committed messages, a small answer for a long run; page those with ``history``)."""
        if not messages:
            resp = await self._unary("Fold", pb.FoldRequest(run_id=run_id, omit_messages=True))
            return codec.state_from_pb(resp.state)
        req = pb.FoldRequest(run_id=run_id, message_window=self.message_window)
        resp = await self._unary("Fold", req)
        await self._complete(run_id, resp.state)
        return codec.state_from_pb(resp.state)

    async def governed_messages(self, run_id: str) -> GovernedView:
        req = pb.FoldRequest(run_id=run_id, governed=True, message_window=self.message_window)
        resp = await self._unary("Fold", req)
        await self._complete(run_id, resp.state)
        plan = window.earlier_for(
            run_id, pb.HISTORY_VIEW_GOVERNED, resp.governed_messages, resp.governed_offset
        )
        if plan is not None:
            window.splice(resp.governed_messages, await self._earlier(plan))
            resp.governed_offset = 0
        return codec.governed_from_pb(resp)

    async def load(self, run_id: str, from_seq: int = 1) -> AsyncGenerator[JournalRecord, None]:
        """The run's stored records from ``from_seq``, streamed (``async for``)."""
        call: Any = self._stub.Load(
            pb.LoadRequest(run_id=run_id, from_seq=from_seq), metadata=codec.metadata()
        )
        try:
            async for m in call:
                yield codec.record_from_pb(m.record)
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        finally:
            call.cancel()

    async def list(self, limit: int = 0) -> list[RunInfo]:
        resp = await self._unary("List", pb.ListRequest(limit=limit))
        return [codec.run_info_from_pb(r) for r in resp.runs]

    async def delete(self, run_id: str) -> bool:
        return bool((await self._unary("Delete", pb.DeleteRequest(run_id=run_id))).deleted)

    async def verify(self, run_id: str) -> VerifyResult:
        return codec.verify_from_pb(await self._unary("Verify", pb.VerifyRequest(run_id=run_id)))

    async def recover(self, run_id: str) -> RecoverResult:
        """As ``Client.recover``."""
        resp = await self._unary("Recover", pb.RecoverRequest(run_id=run_id))
        return codec.recover_from_pb(run_id, resp)

    async def watch(self, run_id: str, from_seq: int = 1) -> AsyncIterator[JournalRecord]:
        """A live tail of the run's records from ``from_seq`` (break out to stop it)."""
        call = self._stub.Watch(
            pb.WatchRequest(run_id=run_id, from_seq=from_seq), metadata=codec.metadata()
        )
        try:
            async for msg in call:
                if msg.HasField("record"):
                    yield codec.record_from_pb(msg.record)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise self._error(exc) from None
        finally:
            call.cancel()

    # --- checkpoints (docs/design.md#checkpoints) -------------------------------------

    async def checkpoint(self, run_id: str, label: str = "") -> CheckpointMeta:
        """Take a checkpoint of the run's folded conversation."""
        resp = await self._unary("Checkpoint", pb.CheckpointRequest(run_id=run_id, label=label))
        return codec.checkpoint_meta_from_pb(resp.checkpoint)

    async def checkpoints(self, run_id: str) -> builtins.list[CheckpointMeta]:
        """The run's checkpoints, oldest first."""
        resp = await self._unary("ListCheckpoints", pb.ListCheckpointsRequest(run_id=run_id))
        return [codec.checkpoint_meta_from_pb(m) for m in resp.checkpoints]

    async def delete_checkpoint(self, run_id: str, checkpoint_id: str) -> bool:
        """Remove a checkpoint (idempotent): False when it did not exist."""
        req = pb.DeleteCheckpointRequest(run_id=run_id, checkpoint_id=checkpoint_id)
        return bool((await self._unary("DeleteCheckpoint", req)).deleted)

    async def restore(
        self, run_id: str, checkpoint_id: str, *, checkpoint: bool = True
    ) -> RestoreResult:
        """Replace the run's conversation by a checkpoint's (see ``Client.restore``)."""
        req = codec.restore_request(run_id, checkpoint_id, checkpoint=checkpoint)
        return codec.restore_from_pb(await self._unary("Restore", req))

    async def compact(
        self,
        run_id: str,
        summary: Summary,
        *,
        keep_last: int = 0,
        checkpoint: bool = True,
        label: str = "",
    ) -> CompactResult:
        """Fold the conversation prefix into ``summary`` (see ``Client.compact``)."""
        req = codec.compact_request(
            run_id, summary, keep_last=keep_last, checkpoint=checkpoint, label=label
        )
        return codec.compact_from_pb(await self._unary("Compact", req))

    async def fork(
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
        the earlier messages are paged through History before this returns, as for
        ``fold``); more: only the newest that many (from a clean tool-call boundary, or
        fewer if they would not fit in the daemon's max message size)."""
        req = codec.fork_request(
            run_id, checkpoint_id, new_run_id, labels, message_window or self.message_window
        )
        resp = await self._unary("Fork", req)
        if message_window <= 0:
            await self._complete(resp.run_id, resp.state)
        return resp.run_id, codec.state_from_pb(resp.state)

    async def export_checkpoint(self, run_id: str, checkpoint_id: str) -> bytes:
        """Self-contained ``journald-checkpoint/1`` bytes (attachments included), of any
        size (sent in chunks: journald_client.checkpoint_transfer)."""
        return await transfer.export_bytes_async(self._stub, self._error, run_id, checkpoint_id)

    async def export_checkpoint_to(self, run_id: str, checkpoint_id: str, out: BinaryIO) -> int:
        """Write the export to ``out`` chunk by chunk (never held whole); its size."""
        return await transfer.export_to_async(
            self._stub, self._error, run_id, checkpoint_id, out.write
        )

    async def import_checkpoint(self, run_id: str, data: bytes) -> CheckpointMeta:
        """Verify exported bytes, then store them as a new checkpoint of ``run_id``."""
        pieces = transfer.bytes_pieces(data)
        return await transfer.import_pieces_async(
            self._stub, self._error, run_id, pieces, lambda: data
        )

    async def import_checkpoint_from(self, run_id: str, source: BinaryIO) -> CheckpointMeta:
        """``import_checkpoint`` of the export read from ``source`` chunk by chunk."""
        return await transfer.import_file_async(self._stub, self._error, run_id, source)

    async def history(
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
        return codec.history_from_pb(await self._unary("History", req))

    async def iter_history(self, run_id: str, page: int = 50) -> AsyncIterator[Message]:
        """Every message of the conversation once, fetched ``page`` at a time."""
        offset = 0
        while True:
            got = await self.history(run_id, offset, max(1, page))
            for m in got.messages:
                yield m
            if codec.history_done(got, offset):
                return
            offset = got.next_offset

    async def put_attachment(
        self, run_id: str, data: bytes, media_type: str, name: str = ""
    ) -> AttachmentRef:
        """Store bytes once per run (content-addressed); put ``.block`` in a record."""
        req = pb.PutAttachmentRequest(run_id=run_id, data=data, media_type=media_type, name=name)
        return codec.attachment_from_pb(await self._unary("PutAttachment", req))

    async def get_attachment(self, run_id: str, sha256: str) -> bytes:
        """An attachment's bytes (``attachment_not_found`` if the run has none such)."""
        req = pb.GetAttachmentRequest(run_id=run_id, sha256=sha256)
        return bytes((await self._unary("GetAttachment", req)).data)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for leases in self._lease_sets:
            await leases.close()
        for run in self._runs:
            await run.close()
        await self._channel.close(None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def connect_async(
    socket: str | None = None,
    *,
    name: str | None = None,
    wait: float = 5.0,
    reconnect_timeout: float = 30.0,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    message_window: int = window.MESSAGE_WINDOW,
    daemon_uid: int | str | None = None,
) -> AsyncClient:
    """An async client whose daemon has answered (``DaemonUnavailable`` otherwise).
    ``max_message_bytes`` caps a gRPC message both ways (default 16 MiB);
    ``message_window`` as for ``connect``."""
    client = AsyncClient(
        socket,
        name=name,
        reconnect_timeout=reconnect_timeout,
        max_message_bytes=max_message_bytes,
        message_window=message_window,
        daemon_uid=daemon_uid,
    )
    try:
        await client.wait_ready(wait)
    except BaseException:
        await client.close()
        raise
    return client
