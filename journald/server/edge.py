"""The one place where journald errors become gRPC statuses (docs/protocol.md#reading-an-error).

Every failed call carries:
* the status code named by the error class (``JournaldError.grpc_status``);
* ``grpc-status-details-bin``: a ``google.rpc.Status`` holding a ``google.rpc.ErrorInfo``
  (domain ``journald``, reason = the machine code, metadata) and our ``ErrorDetail``;
* ``journald-error-bin``: the ``journald.v1.ErrorDetail`` alone, so a client with only
  grpc + protobuf reads the code, the sentence, the metadata and the drift diff.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from journald_client.pb import journal_pb2 as pb

from journald import telemetry
from journald.errors import JournaldError

log = logging.getLogger("journald.server")
DOMAIN = "journald"
ERROR_TRAILER = "journald-error-bin"
STATUS_TRAILER = "grpc-status-details-bin"

Req = TypeVar("Req")
Resp = TypeVar("Resp")


def status_code(err: JournaldError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.grpc_status, grpc.StatusCode.INTERNAL)


def trailers(err: JournaldError) -> tuple[tuple[str, bytes], ...]:
    detail = pb.ErrorDetail(
        code=err.code, message=err.message, metadata=err.metadata, diff=err.diff
    )
    info = error_details_pb2.ErrorInfo(reason=err.code, domain=DOMAIN, metadata=err.metadata)
    packed_info, packed_detail = any_pb2.Any(), any_pb2.Any()
    packed_info.Pack(info)
    packed_detail.Pack(detail)
    status = status_pb2.Status(
        code=status_code(err).value[0], message=err.message, details=[packed_info, packed_detail]
    )
    return (
        (ERROR_TRAILER, detail.SerializeToString()),
        (STATUS_TRAILER, status.SerializeToString()),
    )


def internal(exc: BaseException) -> JournaldError:
    return JournaldError(
        f"the daemon failed unexpectedly ({type(exc).__name__}: {exc}); this "
        "is a bug: the journal is unchanged unless an ack was sent, report it "
        "with the daemon log"
    )


async def abort(context: grpc.aio.ServicerContext[Any, Any], err: JournaldError) -> None:
    await context.abort(status_code(err), f"{err.code}: {err.message}", trailers(err))


def unary(
    fn: Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
) -> Callable[[Any, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]:
    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> Resp:
        try:
            return await telemetry.traced_unary(
                fn.__name__, request, context, fn(self, request, context)
            )
        except JournaldError as err:
            await abort(context, err)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log.exception("unexpected failure in %s", fn.__name__)
            await abort(context, internal(exc))
        raise AssertionError("unreachable: abort raises")

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
        except JournaldError as err:
            await abort(context, err)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log.exception("unexpected failure in %s", fn.__name__)
            await abort(context, internal(exc))

    return wrapper
