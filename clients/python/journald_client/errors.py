"""Typed exceptions for every journald error code (docs/protocol.md#error-codes).

A failed call carries the facts in its ``journald-error-bin`` trailer (a serialized
``journald.v1.ErrorDetail``: code, message, metadata, diff). :func:`from_rpc_error` turns
that back into the matching class below; without the trailer it falls back to the gRPC
status. A daemon that cannot be reached at all is :class:`DaemonUnavailable` (a
:class:`BackendUnavailable`) whose message says how to start it; so is a bare ``INTERNAL``
or ``UNKNOWN`` (the transport's, never the daemon's: see ``TRANSPORT_FAILURES``).

    JournaldError
    ├── NotFoundError: SessionNotFound, CheckpointNotFound, AttachmentNotFound
    ├── SessionExists
    ├── InvalidArgumentError: InvalidId, InvalidRecord, VersionUnsupported,
    │                         SessionMismatch, CheckpointImportInvalid, InvalidRequest,
    │                         InvalidCheckpointId, InvalidDigest
    ├── SeqError: SeqGap, SeqConflict
    ├── LeaseError: Locked (holder_*), LeaseLost
    ├── GateError: Completed, InteractivityMismatch, ProviderChanged, FingerprintDrift (.diff)
    ├── TurnRunning
    ├── StoreCorrupted
    ├── BackendUnavailable: DaemonUnavailable
    ├── StorageFull
    ├── ResponseTooLarge
    ├── Unsupported
    ├── PermissionDenied: UntrustedSocket (raised by the client itself, before dialing)
    ├── ResourceExhausted (.limit, .flag)
    └── ConversationChanged (raised by the client itself, never by the daemon)

The base class itself stands for ``internal`` (a daemon bug). The codes are the words of the
proto's ``ErrorCode`` enum; ``tests/unit/docs/test_contract_enums.py`` keeps them equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grpc
from journald_proto import journal_pb2 as pb

ERROR_TRAILER = "journald-error-bin"
START_HINT = (
    "start it with `journald serve` (or point JOURNALD_SOCKET / the client's socket "
    "argument at the socket of a running daemon)"
)


class JournaldError(Exception):
    """Base of every journald failure seen by a client."""

    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        diff: Sequence[str] = (),
        status: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        self.diff: list[str] = list(diff)
        self.status = status

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class NotFoundError(JournaldError):
    pass


class SessionNotFound(NotFoundError):
    code = "session_not_found"


class CheckpointNotFound(NotFoundError):
    code = "checkpoint_not_found"


class AttachmentNotFound(NotFoundError):
    code = "attachment_not_found"


class SessionExists(JournaldError):
    code = "session_exists"


class InvalidArgumentError(JournaldError):
    pass


class InvalidId(InvalidArgumentError):
    code = "invalid_id"


class InvalidRecord(InvalidArgumentError):
    code = "invalid_record"


class VersionUnsupported(InvalidArgumentError):
    code = "version_unsupported"


class SessionMismatch(InvalidArgumentError):
    code = "session_mismatch"


class CheckpointImportInvalid(InvalidArgumentError):
    code = "checkpoint_import_invalid"


class InvalidRequest(InvalidArgumentError):
    """Undecodable request bytes, or a field over its size limit (``metadata["field"]``)."""

    code = "invalid_request"


class InvalidCheckpointId(InvalidArgumentError):
    code = "invalid_checkpoint_id"


class InvalidDigest(InvalidArgumentError):
    code = "invalid_digest"


class SeqError(JournaldError):
    pass


class SeqGap(SeqError):
    code = "seq_gap"


class SeqConflict(SeqError):
    code = "seq_conflict"


class LeaseError(JournaldError):
    pass


class Locked(LeaseError):
    """The run has another writer; ``holder_*`` name it."""

    code = "locked"

    @property
    def holder_name(self) -> str:
        return self.metadata.get("holder_name", "")

    @property
    def holder_pid(self) -> int | None:
        pid = self.metadata.get("holder_pid", "")
        return int(pid) if pid.isdigit() else None

    @property
    def holder_host(self) -> str:
        return self.metadata.get("holder_host", "")

    @property
    def holder_since(self) -> str:
        return self.metadata.get("holder_since", "")


class LeaseLost(LeaseError):
    code = "lease_lost"


class GateError(JournaldError):
    """A resume gate refused the open (docs/protocol.md#resume-gates)."""


class Completed(GateError):
    code = "completed"


class InteractivityMismatch(GateError):
    code = "interactivity_mismatch"


class ProviderChanged(GateError):
    code = "provider_changed"


class FingerprintDrift(GateError):
    """The configuration drifted; ``diff`` holds one line per field (``model: a -> b``)."""

    code = "fingerprint_drift"


class TurnRunning(JournaldError):
    code = "turn_running"


class ResponseTooLarge(JournaldError):
    """The answer would exceed the daemon's max message size (ask for less)."""

    code = "response_too_large"


class StoreCorrupted(JournaldError):
    code = "store_corrupted"


class BackendUnavailable(JournaldError):
    code = "backend_unavailable"


class DaemonUnavailable(BackendUnavailable):
    """The daemon could not be reached (no socket, nothing listening, connection lost)."""


class StorageFull(JournaldError):
    code = "storage_full"


class Unsupported(JournaldError):
    """The daemon's backend cannot do this operation (e.g. recovery on JetStream)."""

    code = "unsupported"


class PermissionDenied(JournaldError):
    """The run belongs to another uid of a shared daemon (``owner_uid``, ``peer_uid``)."""

    code = "permission_denied"


class UntrustedSocket(PermissionDenied):
    """Client-side, before a byte is sent: the socket (or its directory) is not owned by the
    expected daemon uid, is a symbolic link, or its directory is writable by others, so it
    may be another user's. ``metadata``: ``socket``, ``path``, ``found_uid``,
    ``expected_uid``."""


class ResourceExhausted(JournaldError):
    """A per-peer limit of the daemon was reached: ``limit`` names it, ``flag`` the
    ``journald serve`` option that raises it. Not retried: release what you hold first (a
    Watch cut for falling behind is resumed from its last seq + 1, reading faster)."""

    code = "resource_exhausted"

    @property
    def limit(self) -> str:
        return self.metadata.get("limit", "")

    @property
    def flag(self) -> str:
        return self.metadata.get("flag", "")


class ConversationChanged(JournaldError):
    """Client-side: the run's conversation was replaced (a compaction or restore) between
    reading a message window and paging the messages before it; read the state again."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.code = "conversation_changed"


def _leaves(cls: type[JournaldError]) -> Iterable[type[JournaldError]]:
    for sub in cls.__subclasses__():
        if "code" in sub.__dict__:
            yield sub
        yield from _leaves(sub)


ERRORS_BY_CODE: dict[str, type[JournaldError]] = {c.code: c for c in _leaves(JournaldError)}
"""Every error class by its machine code."""

_FALLBACK: dict[grpc.StatusCode, type[JournaldError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.DATA_LOSS: StoreCorrupted,
}


def from_detail(detail: pb.ErrorDetail, status: grpc.StatusCode | None = None) -> JournaldError:
    """The typed error for a decoded ``ErrorDetail`` (unknown codes keep their code)."""
    cls = ERRORS_BY_CODE.get(detail.code, JournaldError)
    err = cls(detail.message, metadata=dict(detail.metadata), diff=list(detail.diff), status=status)
    if cls is JournaldError and detail.code:
        err.code = detail.code
    return err


def error_detail(trailing_metadata: Iterable[Any] | None) -> pb.ErrorDetail | None:
    """The ``ErrorDetail`` in a call's trailing metadata, if present and decodable."""
    for item in trailing_metadata or ():
        key, value = item[0], item[1]
        if key != ERROR_TRAILER:
            continue
        raw = value if isinstance(value, bytes) else str(value).encode("latin-1")
        try:
            return pb.ErrorDetail.FromString(raw)
        except Exception:  # a malformed trailer falls back to the status
            return None
    return None


def unreachable(target: str, detail: str = "") -> DaemonUnavailable:
    where = target.removeprefix("unix:")
    why = f" ({detail})" if detail else ""
    return DaemonUnavailable(
        f"the journald daemon is not reachable at {where}{why}; {START_HINT}",
        metadata={"socket": where},
        status=grpc.StatusCode.UNAVAILABLE,
    )


TRANSPORT_FAILURES = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
"""Statuses that, without journald's trailer, are gRPC's own: a stream reset, a connection
broken mid-call ("Internal error from Core"). The daemon's edge puts the trailer on every
status it sends, its own ``internal`` included, so these are the transport's answer, not the
daemon's: the call may or may not have reached the daemon, exactly as after ``UNAVAILABLE``.
Other bare statuses (``RESOURCE_EXHAUSTED`` for a request over the message cap, a deadline,
a cancel) would come back the same on a retry and keep their own code."""


def transport_failure(target: str, status: grpc.StatusCode, text: str) -> DaemonUnavailable:
    """A bare INTERNAL/UNKNOWN: the connection failed; retried like an unreachable daemon."""
    where = target.removeprefix("unix:")
    said = f": {text}" if text else ""
    return DaemonUnavailable(
        f"the connection to the journald daemon at {where} failed (gRPC {status.name} without "
        f"journald's error trailer{said}); the call may not have reached the daemon: retry it "
        "(the writers do), and if it keeps failing check the daemon's log",
        metadata={"socket": where, "grpc_status": status.name},
        status=status,
    )


def from_rpc_error(exc: grpc.RpcError, target: str = "") -> JournaldError:
    """Map a failed gRPC call to its typed error."""
    code_fn = getattr(exc, "code", None)
    status: grpc.StatusCode | None = code_fn() if callable(code_fn) else None
    md_fn = getattr(exc, "trailing_metadata", None)
    detail = error_detail(md_fn() if callable(md_fn) else None)
    if detail is not None and detail.code:
        return from_detail(detail, status)
    details_fn = getattr(exc, "details", None)
    text = str(details_fn() or "") if callable(details_fn) else str(exc)
    if status in (grpc.StatusCode.UNAVAILABLE, None):
        return unreachable(target, text)
    if status in TRANSPORT_FAILURES:
        return transport_failure(target, status, text)
    cls = _FALLBACK.get(status, JournaldError)
    err = cls(text or status.name.lower(), status=status)
    if cls is JournaldError or "code" not in cls.__dict__:  # keep the status as the code
        err.code = status.name.lower()  # e.g. resource_exhausted (message over the cap)
    return err
