"""The RPC edge: request bytes in, response bytes out, and the one place where journald errors
become gRPC statuses (docs/protocol.md#reading-an-error).

Every failed call carries:
* the status code named by the error class (``JournaldError.grpc_status``);
* ``grpc-status-details-bin``: a ``google.rpc.Status`` holding a ``google.rpc.ErrorInfo``
  (domain ``journald``, reason = the machine code, metadata) and our ``ErrorDetail``;
* ``journald-error-bin``: the ``journald.v1.ErrorDetail`` alone, so a client with only
  grpc + protobuf reads the code, the sentence, the metadata and the drift diff.

Trailers stay under ``TRAILER_BUDGET_BYTES`` whatever a caller sent: messages, metadata
values and diff lines are cut (``journald.core.errors.clip``) until they fit, far below the 8 KiB
a gRPC client accepts by default, so one client's long strings never turn another client's
``locked`` into a transport error.

A refusal sets the status on the call and returns; it never raises ``context.abort``: the
abort exception would sit on the call's state with a traceback whose frames hold the request
and the context, a reference cycle only the cycle collector frees, so every refused request
(up to the message cap) would stay in memory until the next full collection.

Bytes: the service is registered by ``add_service`` rather than the generated helper so that
* a request that is not a valid message (bad wire format, a string field that is not UTF-8)
  becomes ``Undecodable`` instead of an exception inside gRPC (which answers UNKNOWN without
  a trailer and logs a traceback per call); the handler refuses it with ``invalid_request``
  and logs one line per peer per ``UNDECODABLE_LOG_EVERY_S``;
* a response is serialized here and refused with ``response_too_large`` when it exceeds the
  daemon's max message size (gRPC would fail the call without a trailer and log an error).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc
from google.protobuf import any_pb2
from google.protobuf.descriptor import MethodDescriptor
from google.rpc import error_details_pb2, status_pb2
from journald_proto import journal_pb2 as pb

from journald import telemetry
from journald.core.errors import (
    InvalidRequest,
    JournaldError,
    ResponseTooLarge,
    clip,
)
from journald.server.fairness import BACKGROUND_RPCS, FairShares, PeerBudget, call_budget
from journald.server.owners import PEER_UID, Owners
from journald.storage.io_pool import BACKGROUND

log = logging.getLogger("journald.server")
_CHECKED_INSIDE = frozenset({"Open", "Leases", "List", "ListChanges"})
"""RPCs that check their runs' owners themselves (docs/design.md#who-may-talk-to-whom)."""
DOMAIN = "journald"
ERROR_TRAILER = "journald-error-bin"
STATUS_TRAILER = "grpc-status-details-bin"
SERVICE = pb.DESCRIPTOR.services_by_name["JournalService"]

TRAILER_BUDGET_BYTES = 4096
"""Most bytes a refusal's trailers take (details header, both -bin trailers)."""
# (message bytes, bytes per metadata value or diff line, diff lines): tried in order
_CUTS = ((1024, 256, 16), (512, 128, 8), (256, 64, 4), (160, 32, 0))
_METADATA_KEYS = 16
UNDECODABLE_LOG_EVERY_S = 600.0
_UNDECODABLE_PEERS = 1024

Ctx = grpc.aio.ServicerContext[Any, Any]
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def status_code(err: JournaldError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.grpc_status, grpc.StatusCode.INTERNAL)


def _header_bytes(text: str) -> int:
    """Size of ``text`` as the grpc-message header (percent-encoded outside printable ASCII)."""
    return sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in text.encode())


@dataclass(frozen=True, slots=True)
class Refusal:
    """Everything a failed call sends, built from the error (and holding nothing of it)."""

    status: grpc.StatusCode
    details: str
    trailers: tuple[tuple[str, bytes], ...]

    @property
    def size_bytes(self) -> int:
        return _header_bytes(self.details) + sum(len(k) + len(v) for k, v in self.trailers)


def _detail(err: JournaldError, message_bytes: int, value_bytes: int, lines: int) -> pb.ErrorDetail:
    metadata = {
        clip(k, 64, keep_tail=False): clip(v, value_bytes, keep_tail=False)
        for k, v in list(err.metadata.items())[:_METADATA_KEYS]
    }
    diff = [clip(line, value_bytes, keep_tail=False) for line in err.diff[:lines]]
    return pb.ErrorDetail(
        code=err.code, message=clip(err.message, message_bytes), metadata=metadata, diff=diff
    )


def _refusal(err: JournaldError, message_bytes: int, value_bytes: int, lines: int) -> Refusal:
    detail = _detail(err, message_bytes, value_bytes, lines)
    message, metadata = detail.message, dict(detail.metadata)
    info = error_details_pb2.ErrorInfo(reason=err.code, domain=DOMAIN, metadata=metadata)
    packed_info, packed_detail = any_pb2.Any(), any_pb2.Any()
    packed_info.Pack(info)
    packed_detail.Pack(detail)
    code = status_code(err)
    status = status_pb2.Status(
        code=code.value[0], message=message, details=[packed_info, packed_detail]
    )
    return Refusal(
        code,
        f"{err.code}: {message}",
        (
            (ERROR_TRAILER, detail.SerializeToString()),
            (STATUS_TRAILER, status.SerializeToString()),
        ),
    )


def refusal(err: JournaldError) -> Refusal:
    """The status of ``err``, cut to ``TRAILER_BUDGET_BYTES``."""
    for message_bytes, value_bytes, lines in _CUTS:
        out = _refusal(err, message_bytes, value_bytes, lines)
        if out.size_bytes <= TRAILER_BUDGET_BYTES:
            break
    return out


def error_detail(err: JournaldError) -> pb.ErrorDetail:
    """``err`` as the ``ErrorDetail`` of a refusal sent inside a stream message (a ``Leases``
    answer), cut as the trailers of a failed call are."""
    return _detail(err, *_CUTS[0])


def internal(exc: BaseException) -> JournaldError:
    return JournaldError(
        f"the daemon failed unexpectedly ({type(exc).__name__}: {exc}); this "
        "is a bug: the journal is unchanged unless an ack was sent, report it "
        "with the daemon log"
    )


def send(context: Ctx, refused: Refusal) -> None:
    """Fail the call with ``refused`` (sent when the handler returns)."""
    context.set_code(refused.status)
    context.set_details(refused.details)
    context.set_trailing_metadata(refused.trailers)


# --- servicer methods: errors to statuses ---------------------------------------------------


def unary(
    fn: Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
) -> Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]:
    """Errors to statuses; a refused call returns None (no response) with its status set."""

    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> Resp:
        # the exception (its traceback holds the request) ends with its except block
        try:
            return await telemetry.traced_unary(
                fn.__name__, request, context, fn(self, request, context)
            )
        except JournaldError as err:
            refused = refusal(err)
        except Exception as exc:
            log.exception("unexpected failure in %s", fn.__name__)
            refused = refusal(internal(exc))
        send(context, refused)
        return cast(Resp, None)

    return wrapper


def streaming(
    fn: Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]],
) -> Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], AsyncIterator[Resp]]:
    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> AsyncIterator[Resp]:
        try:
            stream = fn(self, request, context)
            async for item in telemetry.traced_stream(fn.__name__, request, context, stream):
                yield item
                del item  # not held while the stream waits (a held Open: the lease's life)
            return
        except JournaldError as err:
            refused = refusal(err)
        except Exception as exc:
            log.exception("unexpected failure in %s", fn.__name__)
            refused = refusal(internal(exc))
        send(context, refused)

    return wrapper


# --- bytes: requests in, responses out ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request that is not a valid message of its type (it holds none of the bytes)."""

    message_type: str
    reason: str
    size_bytes: int


def decoder(cls: Any, on_size: Callable[[int], None]) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name

    def decode(data: bytes) -> Any:
        on_size(len(data))
        try:
            return cls.FromString(data)
        except Exception as exc:  # DecodeError, and whatever else hostile bytes provoke
            reason = clip(str(exc) or type(exc).__name__, 200)
        return Undecodable(name, reason, len(data))

    return decode


def undecodable_error(bad: Undecodable, method: str) -> InvalidRequest:
    return InvalidRequest(
        f"the {method} request ({bad.size_bytes} bytes) is not a valid {bad.message_type} "
        f"({bad.reason}); nothing was done. Send messages built from journald/v1/"
        "journal.proto by a journald client (a string field must be UTF-8)",
        metadata={"method": method, "message_type": bad.message_type},
    )


class PeerLog:
    """One WARNING per peer per ``every_s`` (a flood of bad calls is one line, not a flood)."""

    def __init__(self, every_s: float = UNDECODABLE_LOG_EVERY_S) -> None:
        self.every_s = every_s
        self._peers: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def note(self, peer: str, method: str, bad: Undecodable) -> None:
        now = time.monotonic()
        last = self._peers.get(peer)
        if last is not None and now - last[0] < self.every_s:
            self._peers[peer] = (last[0], last[1] + 1)
            return
        self._peers[peer] = (now, 0)
        self._peers.move_to_end(peer)
        while len(self._peers) > _UNDECODABLE_PEERS:
            self._peers.popitem(last=False)
        more = f" ({last[1]} more since the last line)" if last else ""
        log.warning(
            "undecodable %s request from %s to %s (%s), answered invalid_request%s; the next "
            "ones from this peer in %.0f s are answered the same without a log line",
            bad.message_type,
            peer or "an unknown peer",
            method,
            bad.reason,
            more,
            self.every_s,
        )


def _too_large(method: str, size: int, cap: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"the {method} response is {size} bytes, above the daemon's max message size of {cap} "
        "bytes (--max-message-bytes), so it was not sent; what the call changed (if anything) "
        "stands. Read the result in parts (History pages, Load from a seq) or start the "
        "daemon with a larger --max-message-bytes",
        metadata={"method": method, "bytes": size, "limit_bytes": cap},
    )


class Edge:
    """The handlers of the RPC parts (each RPC implemented by exactly one), with the daemon's
    max message size; ``on_size`` sees the size of every message in and out."""

    def __init__(
        self,
        parts: Sequence[Any],
        max_message_bytes: int,
        on_size: Callable[[int], None],
        owners: Owners | None = None,
        peer_uid: int | None = None,
        budget: PeerBudget | None = None,
    ) -> None:
        self.parts = parts
        self.cap = max_message_bytes
        self.on_size = on_size
        self.undecodable = PeerLog()
        self.budget = budget or PeerBudget(FairShares().resolved())
        self.owners = owners if owners is not None and owners.enforcing else None
        """Checks every run a call names against the peer's uid (a shared daemon only)."""
        self.peer_uid = peer_uid

    async def _admitted(self, context: Ctx, name: str, request: Any) -> bool:
        """Sets the call's peer; False (refused, status set) when it names a run of another
        uid. Open checks under the run's opening lock instead (a run may appear meanwhile)."""
        PEER_UID.set(self.peer_uid)
        if self.owners is None or name in _CHECKED_INSIDE:
            return True
        try:
            await self.owners.check(request.run_id)
        except JournaldError as err:
            send(context, refusal(err))
            return False
        return True

    def _refuse_undecodable(self, context: Ctx, method: str, bad: Undecodable) -> None:
        self.undecodable.note(context.peer(), method, bad)
        send(context, refusal(undecodable_error(bad, method)))

    def _encode(self, context: Ctx, method: str, response: Any) -> bytes | None:
        data: bytes = response.SerializeToString()
        self.on_size(len(data))
        if len(data) > self.cap:
            send(context, refusal(_too_large(method, len(data), self.cap)))
            return None
        return data

    def handler(self, method: MethodDescriptor) -> grpc.RpcMethodHandler[Any, Any]:
        name = method.name
        fn = implementation(self.parts, name)
        decode = decoder(getattr(pb, method.input_type.name), self.on_size)
        background = name in BACKGROUND_RPCS
        budget = self.budget

        async def unary_unary(request: Any, context: Ctx) -> bytes | None:
            if isinstance(request, Undecodable):
                self._refuse_undecodable(context, name, request)
                return None
            if not await self._admitted(context, name, request):
                return None
            if background:  # this call's task alone: its reads queue on the read threads
                BACKGROUND.set(True)
            try:
                with call_budget(budget, context, name):
                    response = await fn(request, context)
            except JournaldError as err:  # a per-peer limit: nothing was held
                send(context, refusal(err))
                return None
            return None if response is None else self._encode(context, name, response)

        async def out(stream: AsyncIterator[Any], context: Ctx) -> AsyncIterator[bytes]:
            # no local outlives its yield: a held Open stream waits here for the lease's
            # whole life, and its first answer (the state, up to the message cap) is sent
            try:
                async for item in stream:
                    data = self._encode(context, name, item)
                    del item
                    if data is None:
                        return
                    yield data
                    del data
            finally:
                await stream.aclose()  # type: ignore[attr-defined]

        async def unary_stream(request: Any, context: Ctx) -> AsyncIterator[bytes]:
            if isinstance(request, Undecodable):
                self._refuse_undecodable(context, name, request)
                return
            if not await self._admitted(context, name, request):
                return
            if background:
                BACKGROUND.set(True)
            try:
                held = call_budget(budget, context, name)
                held.__enter__()
            except JournaldError as err:
                send(context, refusal(err))
                return
            try:
                async for data in out(fn(request, context), context):
                    yield data
                    del data  # not held while the stream waits (``out``)
            finally:
                held.__exit__(None, None, None)

        async def checked(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Undecodable):
                    self.undecodable.note(context.peer(), name, request)
                    raise undecodable_error(request, name)
                if self.owners is not None and name not in _CHECKED_INSIDE:
                    for run_id in _run_ids(request):
                        await self.owners.check(run_id)
                yield request

        async def stream_stream(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[bytes]:
            PEER_UID.set(self.peer_uid)
            try:
                held = call_budget(budget, context, name)
                held.__enter__()
            except JournaldError as err:
                send(context, refusal(err))
                return
            try:
                async for data in out(fn(checked(requests, context), context), context):
                    yield data
            finally:
                held.__exit__(None, None, None)

        async def stream_unary(requests: AsyncIterator[Any], context: Ctx) -> bytes | None:
            PEER_UID.set(self.peer_uid)
            try:
                with call_budget(budget, context, name):
                    response = await fn(checked(requests, context), context)
            except JournaldError as err:  # a per-peer limit: nothing was held
                send(context, refusal(err))
                return None
            return None if response is None else self._encode(context, name, response)

        if method.client_streaming and method.server_streaming:
            return grpc.stream_stream_rpc_method_handler(stream_stream, request_deserializer=decode)
        if method.client_streaming:
            return grpc.stream_unary_rpc_method_handler(stream_unary, request_deserializer=decode)
        if method.server_streaming:
            return grpc.unary_stream_rpc_method_handler(unary_stream, request_deserializer=decode)
        return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer=decode)


def _run_ids(request: Any) -> list[str]:
    """The runs one request of a client stream names: each append's (AppendStream), else
    its own ``run_id`` when set (ImportCheckpointChunks names it in its first request)."""
    if hasattr(request, "appends"):
        return [a.run_id for a in request.appends or (request.append,)]
    run_id = getattr(request, "run_id", "")
    return [run_id] if run_id else []


def implementation(parts: Sequence[Any], name: str) -> Any:
    """The one part's method that implements RPC ``name``; refused at start-up when none or
    several do (a forgotten or doubly defined RPC must not surface as UNIMPLEMENTED later)."""
    found = [getattr(p, name) for p in parts if callable(getattr(p, name, None))]
    if len(found) != 1:
        owners = [type(p).__name__ for p in parts if callable(getattr(p, name, None))]
        raise TypeError(f"RPC {name} must be implemented by exactly one part, not {owners}")
    return found[0]


def add_service(
    server: grpc.aio.Server,
    parts: Sequence[Any],
    max_message_bytes: int,
    on_size: Callable[[int], None] = lambda size_bytes: None,
    owners: Owners | None = None,
    peer_uid: int | None = None,
    budget: PeerBudget | None = None,
) -> None:
    """Register ``parts`` as journald.v1.JournalService (in place of the generated helper);
    ``peer_uid``: the uid of every peer of ``server`` (journald.server.peers), whose calls
    ``owners`` checks; every call holds its share of ``budget`` (docs/design.md#fair-shares)
    while it runs."""
    edge = Edge(parts, max_message_bytes, on_size, owners, peer_uid, budget)
    handlers = {m.name: edge.handler(m) for m in SERVICE.methods}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    # newer than grpc-stubs: lets gRPC route the methods without the generic lookup
    server.add_registered_method_handlers(SERVICE.full_name, handlers)  # type: ignore[attr-defined]
