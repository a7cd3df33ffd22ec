"""The one error tree of journald (docs/protocol.md#error-codes).

Every failure is a ``JournaldError`` with a machine ``code``, the name of the gRPC status it
maps to, a sentence that says what happened *and what to do*, and structured ``metadata``.
The server maps it to a status exactly once (``journald.server.edge``); every client
maps it back to its own typed error from the code.

    JournaldError
    ├── NotFoundError            NOT_FOUND
    │   ├── SessionNotFound          session_not_found
    │   ├── CheckpointNotFound       checkpoint_not_found
    │   └── AttachmentNotFound       attachment_not_found
    ├── SessionExists            ALREADY_EXISTS        session_exists
    ├── InvalidArgumentError     INVALID_ARGUMENT
    │   ├── InvalidId                invalid_id
    │   ├── InvalidRecord            invalid_record
    │   ├── VersionUnsupported       version_unsupported
    │   ├── SessionMismatch          session_mismatch
    │   ├── CheckpointImportInvalid  checkpoint_import_invalid
    │   ├── InvalidRequest           invalid_request       (undecodable bytes, a field over
    │   │                                                   its size limit)
    │   ├── InvalidCheckpointId      invalid_checkpoint_id
    │   └── InvalidDigest            invalid_digest
    ├── SeqError                 FAILED_PRECONDITION
    │   ├── SeqGap                   seq_gap
    │   └── SeqConflict              seq_conflict      (ABORTED)
    ├── LeaseError
    │   ├── Locked                   locked            (ABORTED)
    │   └── LeaseLost                lease_lost        (FAILED_PRECONDITION)
    ├── GateError                FAILED_PRECONDITION   (docs/protocol.md#resume-gates, in order)
    │   ├── Completed                completed
    │   ├── InteractivityMismatch    interactivity_mismatch
    │   ├── ProviderChanged          provider_changed
    │   └── FingerprintDrift         fingerprint_drift (carries the per-field diff)
    ├── TurnRunning              FAILED_PRECONDITION   turn_running
    ├── StoreCorrupted           DATA_LOSS             store_corrupted
    ├── BackendUnavailable       UNAVAILABLE           backend_unavailable
    ├── StorageFull              RESOURCE_EXHAUSTED    storage_full
    ├── ResponseTooLarge         RESOURCE_EXHAUSTED    response_too_large
    ├── Unsupported              UNIMPLEMENTED         unsupported (e.g. recovery on JetStream)
    └── ResourceExhausted        RESOURCE_EXHAUSTED    resource_exhausted (a per-peer limit;
                                                        metadata ``limit`` and ``flag``)

The base class's own code, ``internal``, is a daemon bug. The codes are the words of the
proto's ``ErrorCode`` enum, whose comments name each code's status;
``tests/unit/docs/test_contract_enums.py`` keeps this tree, the clients and the enum equal.

This module is part of the pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class JournaldError(Exception):
    """Base of every journald failure."""

    code: str = "internal"
    grpc_status: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, object] | None = None,
        diff: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = {k: str(v) for k, v in (metadata or {}).items()}
        self.diff: list[str] = list(diff)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class NotFoundError(JournaldError):
    grpc_status = "NOT_FOUND"


class SessionNotFound(NotFoundError):
    code = "session_not_found"


class CheckpointNotFound(NotFoundError):
    code = "checkpoint_not_found"


class AttachmentNotFound(NotFoundError):
    code = "attachment_not_found"


class SessionExists(JournaldError):
    code = "session_exists"
    grpc_status = "ALREADY_EXISTS"


class InvalidArgumentError(JournaldError):
    grpc_status = "INVALID_ARGUMENT"


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
    code = "invalid_request"


class InvalidCheckpointId(InvalidArgumentError):
    code = "invalid_checkpoint_id"


class InvalidDigest(InvalidArgumentError):
    code = "invalid_digest"


class SeqError(JournaldError):
    grpc_status = "FAILED_PRECONDITION"


class SeqGap(SeqError):
    code = "seq_gap"


class SeqConflict(SeqError):
    code = "seq_conflict"
    grpc_status = "ABORTED"


class LeaseError(JournaldError):
    grpc_status = "FAILED_PRECONDITION"


class Locked(LeaseError):
    code = "locked"
    grpc_status = "ABORTED"


class LeaseLost(LeaseError):
    code = "lease_lost"


class GateError(JournaldError):
    grpc_status = "FAILED_PRECONDITION"


class Completed(GateError):
    code = "completed"


class InteractivityMismatch(GateError):
    code = "interactivity_mismatch"


class ProviderChanged(GateError):
    code = "provider_changed"


class FingerprintDrift(GateError):
    code = "fingerprint_drift"


class TurnRunning(JournaldError):
    code = "turn_running"
    grpc_status = "FAILED_PRECONDITION"


class StoreCorrupted(JournaldError):
    code = "store_corrupted"
    grpc_status = "DATA_LOSS"


class BackendUnavailable(JournaldError):
    code = "backend_unavailable"
    grpc_status = "UNAVAILABLE"


class StorageFull(JournaldError):
    code = "storage_full"
    grpc_status = "RESOURCE_EXHAUSTED"


class ResponseTooLarge(JournaldError):
    """An answer would exceed the daemon's max message size: ask for less (a message window,
    a smaller History page) instead."""

    code = "response_too_large"
    grpc_status = "RESOURCE_EXHAUSTED"


class Unsupported(JournaldError):
    """The backend cannot do this operation at all (retrying will not help)."""

    code = "unsupported"
    grpc_status = "UNIMPLEMENTED"


class PermissionDenied(JournaldError):
    """The caller's uid may not touch this run: another uid of a shared daemon created it
    (docs/design.md#who-may-talk-to-whom)."""

    code = "permission_denied"
    grpc_status = "PERMISSION_DENIED"


class ResourceExhausted(JournaldError):
    """A per-peer limit of the daemon (connections, calls, leases, in-flight bytes, a Watch
    buffer) was reached. ``metadata`` names the ``limit``, its ``limit_value`` and the
    ``flag`` of ``journald serve`` that raises it; a client releases what it holds before
    trying again, never in a tight loop."""

    code = "resource_exhausted"
    grpc_status = "RESOURCE_EXHAUSTED"


def limit_reached(
    what: str, limit: str, value: int, flag: str, advice: str, **metadata: object
) -> ResourceExhausted:
    """The refusal of one per-peer limit, with the sentence every such refusal carries."""
    return ResourceExhausted(
        f"{what}: the daemon's limit {limit} = {value} is reached ({advice}); nothing was "
        f"done. Raise it with `journald serve {flag}` if this load is expected",
        metadata={"limit": limit, "limit_value": value, "flag": flag, **metadata},
    )


def clip(text: str, limit_bytes: int, keep_tail: bool = True) -> str:
    """``text`` if its UTF-8 form fits ``limit_bytes``, else cut to fit with a mark saying how
    many bytes went. ``keep_tail``: keep the head and the tail (the tail of an error message
    says what to do), else the head only (ids, names)."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit_bytes:
        return text
    mark = f"…[{len(raw)} bytes]…" if keep_tail else "…"
    room = max(0, limit_bytes - len(mark.encode()))
    tail = room * 2 // 5 if keep_tail else 0
    head = raw[: room - tail].decode("utf-8", "ignore")
    end = raw[len(raw) - tail :].decode("utf-8", "ignore") if tail else ""
    return head + mark + end


def _leaves(cls: type[JournaldError]) -> list[type[JournaldError]]:
    out: list[type[JournaldError]] = []
    for sub in cls.__subclasses__():
        out.extend(_leaves(sub))
        if "code" in sub.__dict__:
            out.append(sub)
    return out


ERRORS_BY_CODE: dict[str, type[JournaldError]] = {c.code: c for c in _leaves(JournaldError)}
"""Every concrete error class by its machine code (the clients' mapping table)."""


def from_code(
    code: str, message: str, metadata: Mapping[str, str] | None = None, diff: Sequence[str] = ()
) -> JournaldError:
    """Rebuild a typed error from its wire form (unknown codes become the base class)."""
    cls = ERRORS_BY_CODE.get(code, JournaldError)
    err = cls(message, metadata=metadata, diff=diff)
    if cls is JournaldError:
        err.code = code
    return err
