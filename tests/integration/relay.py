"""A gRPC relay in front of a real daemon that fails chosen calls the way the transport does.

Every JournalService and health call is passed through, bytes unchanged, to the daemon on
its own socket, with the daemon's refusals (status, message, trailers) passed back. Armed
with ``cut``, it ends the next append the way a broken connection does, after the daemon
has stored it: the daemon's answer is dropped and the client gets a bare status of the
chosen code, without journald's ``journald-error-bin`` trailer. A client must treat that as
the transport's failure (reconnect, resend the same seqs, the daemon answers ``duplicate``),
not as the daemon's ``internal``.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, NoReturn

import grpc
from journald_client.pb import journal_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["JournalService"]
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


class Relay:
    """``with Relay(daemon_socket) as relay:`` serve on ``relay.socket``; ``relay.cut(...)``
    arms one failure; ``relay.cuts`` counts those done."""

    def __init__(self, daemon_socket: Path) -> None:
        self._up = grpc.insecure_channel(f"unix://{daemon_socket}")
        self._dir = tempfile.mkdtemp(prefix="jd-relay-")  # a unix socket path stays short
        self.socket = Path(self._dir) / "relay.sock"
        self._lock = threading.Lock()
        self._armed: tuple[grpc.StatusCode, int] | None = None
        self.cuts = 0
        self.append_streams = 0
        handlers: dict[str, Any] = {}
        for m in SERVICE.methods:
            path = f"/{SERVICE.full_name}/{m.name}"
            handlers[path] = self._handler(path, m.client_streaming, m.server_streaming)
        handlers[HEALTH_CHECK] = self._handler(HEALTH_CHECK, False, False)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers((_Routes(handlers),))
        self._server.add_insecure_port(f"unix:{self.socket}")

    def cut(self, code: grpc.StatusCode, *, after_answers: int = 1) -> None:
        """End the next append (unary ``Append``, or the next ``AppendStream`` once the
        daemon answered ``after_answers`` appends on it, in however many messages) with a
        bare ``code``, dropping the daemon's last answer message: its records are stored,
        the client never hears so."""
        with self._lock:
            self._armed = (code, after_answers)

    def _take(self, answered: int) -> grpc.StatusCode | None:
        with self._lock:
            if self._armed is None or answered < self._armed[1]:
                return None
            code, self._armed = self._armed[0], None
            self.cuts += 1
            return code

    def __enter__(self) -> Relay:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(None).wait()
        self._up.close()
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)

    # --- pass-through ---------------------------------------------------------------------

    def _handler(self, path: str, client_streaming: bool, server_streaming: bool) -> Any:
        if path.endswith("/AppendStream"):
            return grpc.stream_stream_rpc_method_handler(self._append_stream)
        if path.endswith("/Append"):
            return grpc.unary_unary_rpc_method_handler(self._append)
        kinds: dict[tuple[bool, bool], tuple[Callable[..., Any], Callable[..., Any]]] = {
            (False, False): (self._up.unary_unary, grpc.unary_unary_rpc_method_handler),
            (False, True): (self._up.unary_stream, grpc.unary_stream_rpc_method_handler),
            (True, False): (self._up.stream_unary, grpc.stream_unary_rpc_method_handler),
            (True, True): (self._up.stream_stream, grpc.stream_stream_rpc_method_handler),
        }
        stub_of, handler_of = kinds[(client_streaming, server_streaming)]
        upstream = stub_of(path)
        if server_streaming:

            def streamed(request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
                call = upstream(request, metadata=_forwarded(context))
                context.add_callback(call.cancel)  # the client went away: so does the relay
                try:
                    yield from call
                except grpc.RpcError as exc:
                    _pass_back(exc, context)

            return handler_of(streamed)

        def unary(request: Any, context: grpc.ServicerContext) -> bytes:
            try:
                answer: bytes = upstream(request, metadata=_forwarded(context))
            except grpc.RpcError as exc:
                _pass_back(exc, context)
            return answer

        return handler_of(unary)

    def _append(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        upstream = self._up.unary_unary(f"/{SERVICE.full_name}/Append", None, None)
        try:
            answer: bytes = upstream(request, metadata=_forwarded(context))
        except grpc.RpcError as exc:
            _pass_back(exc, context)
        code = self._take(1)
        if code is not None:
            context.abort(code, "relay: connection cut after the daemon answered")
        return answer

    def _append_stream(
        self, requests: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        with self._lock:
            self.append_streams += 1
        call = self._up.stream_stream(f"/{SERVICE.full_name}/AppendStream", None, None)(
            requests, metadata=_forwarded(context)
        )
        context.add_callback(call.cancel)
        answered = 0  # appends answered: a coalesced message answers several
        try:
            for answer in call:
                msg = pb.AppendStreamResponse.FromString(answer)
                answered += len(msg.responses) or 1
                code = self._take(answered)
                if code is not None:
                    call.cancel()
                    context.abort(code, "relay: connection cut after the daemon answered")
                yield answer
        except grpc.RpcError as exc:
            _pass_back(exc, context)


class _Routes(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    def __init__(self, handlers: dict[str, Any]) -> None:
        self._handlers = handlers

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        return self._handlers.get(details.method)


def _forwarded(context: grpc.ServicerContext) -> tuple[tuple[str, str | bytes], ...]:
    """The caller's own metadata (a traceparent), not gRPC's headers."""
    return tuple(
        (k, v)
        for k, v in context.invocation_metadata()
        if not k.startswith(":") and k not in ("user-agent", "content-type", "te")
    )


def _pass_back(exc: grpc.RpcError, context: grpc.ServicerContext) -> NoReturn:
    """End the relayed call with the daemon's own status and trailers."""
    trailers = getattr(exc, "trailing_metadata", lambda: None)() or ()
    context.set_trailing_metadata(tuple((k, v) for k, v in trailers))
    context.abort(exc.code(), exc.details() or "")
