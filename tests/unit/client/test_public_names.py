"""``journald_client.__all__`` is the Python client's public surface, pinned here name by name:
an accidental export, or a name dropped from it, fails this test instead of reaching users.
Changing the set is a decision: edit ``PUBLIC`` in the same commit (and the client's README
when a user could notice)."""

from __future__ import annotations

import journald_client

PUBLIC = frozenset(
    {
        "Ack",
        "AsyncClient",
        "AsyncLeaseSet",
        "AsyncPending",
        "AsyncPipelinedWriter",
        "AsyncRun",
        "AttachmentNotFound",
        "AttachmentRef",
        "BackendUnavailable",
        "CheckpointChange",
        "CheckpointImportInvalid",
        "CheckpointMeta",
        "CheckpointNotFound",
        "Client",
        "CompactResult",
        "Completed",
        "ConversationChanged",
        "Counters",
        "DaemonUnavailable",
        "Entry",
        "Fingerprint",
        "FingerprintDrift",
        "GateError",
        "GovernedView",
        "HistoryPage",
        "InteractivityMismatch",
        "InvalidArgumentError",
        "InvalidCheckpointId",
        "InvalidDigest",
        "InvalidId",
        "InvalidRecord",
        "InvalidRequest",
        "JournalRecord",
        "JournaldError",
        "LeaseError",
        "LeaseHolder",
        "LeaseLost",
        "LeaseSet",
        "LeaseWarning",
        "ListChange",
        "ListChanges",
        "Locked",
        "MESSAGE_WINDOW",
        "NotFoundError",
        "PageRef",
        "Pending",
        "PendingResult",
        "PendingTurn",
        "PermissionDenied",
        "PipelinedWriter",
        "ProviderChanged",
        "QuarantinedRecord",
        "RecoverResult",
        "ResourceExhausted",
        "ResponseTooLarge",
        "RestoreResult",
        "Run",
        "RunInfo",
        "RunState",
        "SeqConflict",
        "SeqError",
        "SeqGap",
        "SessionExists",
        "SessionMismatch",
        "SessionNotFound",
        "StateEntry",
        "StorageFull",
        "StoreCorrupted",
        "ToolCall",
        "ToolOutput",
        "TurnRunning",
        "Unsupported",
        "UntrustedSocket",
        "VerifyResult",
        "VersionUnsupported",
        "Watch",
        "compute",
        "connect",
        "connect_async",
        "default_socket_path",
    }
)


def drift(exported: list[str], pinned: frozenset[str]) -> str:
    """What ``exported`` adds to or drops from ``pinned``, as a sentence ('' when equal)."""
    added, dropped = sorted(set(exported) - pinned), sorted(pinned - set(exported))
    parts = [f"exported but not pinned: {added}"] * bool(added)
    parts += [f"pinned but no longer exported: {dropped}"] * bool(dropped)
    return "; ".join(parts)


def test_the_client_exports_exactly_the_pinned_names() -> None:
    assert drift(journald_client.__all__, PUBLIC) == ""
    assert len(journald_client.__all__) == len(set(journald_client.__all__)), "a name twice"


def test_every_exported_name_is_defined_and_a_star_import_gives_exactly_them() -> None:
    missing = [n for n in journald_client.__all__ if not hasattr(journald_client, n)]
    assert missing == []
    namespace: dict[str, object] = {}
    # the star import a user writes, run for real
    exec("from journald_client import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC


def test_an_added_or_a_dropped_name_is_named() -> None:
    pinned = frozenset({"Client", "connect"})
    assert drift(["Client", "connect"], pinned) == ""
    assert drift(["Client", "connect", "_codec"], pinned) == "exported but not pinned: ['_codec']"
    assert drift(["Client"], pinned) == "pinned but no longer exported: ['connect']"
