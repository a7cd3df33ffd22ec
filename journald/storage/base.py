"""The storage protocol every backend implements (memory, file, JetStream).

A ``Store`` holds runs; ``Store.open``/``Store.create`` return the single ``Journal`` handle
that may append to a run (exclusive within the store: a second open is ``Locked``).
Reads (``load``, ``iter_records``, ``info``, ``list``, ``verify``) never take that handle, so
inspection never blocks a writer.

Append contract (docs/protocol.md#seq-rules), identical in every backend and proved by the
shared contract suite in ``tests/storage/contract/test_contract.py``:

* ``Journal.append(records)`` takes records with consecutive seqs. The ``prev`` of each
  record is advisory: the journal links every new record onto its own last hash.
* seq == last+1 → written; seq > last+1 → ``SeqGap``; seq <= last → the stored record at
  that seq is compared with the incoming one re-linked onto the stored ``prev``: identical
  bytes → success with ``duplicate=True`` and the stored hash; else ``SeqConflict``.
* ``last_seq``/``last_hash`` advance only after the batch is durable; a failed write leaves
  the journal exactly as it was (and appendable at the same seq).
* Records queued concurrently on one journal may be group-committed: one write and one
  durability barrier for all of them. An append whose seq is ahead of the queue waits
  briefly (``gap_wait_s``) for the seqs before it before failing with ``SeqGap``, so
  parallel tools finishing together can append without serializing in the client.
* Each result states the durability level it carries.

Every backend's journal runs these rules through the one ``AppendPipeline``
(``journald.storage.pipeline``, its ``pipeline`` attribute); a backend only writes a group of
new records durably and reads stored ones back for retry comparisons.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from journald.core.records import Record

RecordCheck = Callable[[Record], None]
"""A check a record the store builds itself must pass (the daemon's gate)."""

if TYPE_CHECKING:
    from journald.storage.pipeline import AppendPipeline

MEMORY = "memory"
FSYNC_LOCAL = "fsync_local"
JETSTREAM_ACK = "jetstream_ack"
DEFAULT_GAP_WAIT_S = 0.5


@dataclass(frozen=True, slots=True)
class AppendResult:
    seq: int
    hash: str
    durability: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What an open for append repaired (a torn final line)."""

    file: str
    dropped_bytes: int
    broken_copy: str
    last_seq: int

    def sentence(self) -> str:
        return (
            f"a torn final record ({self.dropped_bytes} bytes) was found in {self.file}, "
            f"copied to {self.broken_copy} and cut; the journal resumes after seq "
            f"{self.last_seq}"
        )


@dataclass(slots=True)
class RunInfo:
    run_id: str
    created: str = ""
    updated: str = ""
    model: str = ""
    prompt_preview: str = ""
    status: str = "open"
    record_count: int = 0
    bytes: int = 0
    last_seq: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    error: str = ""
    """Why the run cannot be read (status ``corrupted``): the ``store_corrupted`` message."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    records: int
    last_seq: int
    last_hash: str
    segments: int = 1


@dataclass(slots=True)
class QuarantineReport:
    """Recovery mode: what was moved out of a run (no message text, only positions and hashes)
    and how the hole is recorded in the run (a rebase with reason ``quarantine``)."""

    run_id: str
    quarantined: int = 0
    positions: list[dict[str, object]] = field(default_factory=list)
    directory: str = ""
    hole_from: int = 0
    """First and last seq no longer in the run (damaged, or missing with no bytes left)."""
    hole_to: int = 0
    rebase: Record | None = None
    """The record that states the hole and the rebuilt conversation (None: nothing moved)."""
    repaired: str = ""
    """A torn write cut on the way (``RepairReport.sentence``), else empty."""
    last_seq: int = 0


@runtime_checkable
class Journal(Protocol):
    """The exclusive append handle of one run."""

    run_id: str
    durability: str
    pipeline: AppendPipeline

    @property
    def last_seq(self) -> int: ...

    @property
    def last_hash(self) -> str: ...

    @property
    def repair(self) -> RepairReport | None: ...

    async def append(self, records: Sequence[Record]) -> list[AppendResult]: ...

    async def close(self) -> None: ...


@runtime_checkable
class Store(Protocol):
    durability: str

    async def create(self, meta: Record) -> Journal:
        """Create a run from its meta record (seq 1), durably; ``SessionExists`` if present."""
        ...

    async def open(self, run_id: str) -> Journal:
        """Open a run for append (repairing a torn tail); ``SessionNotFound``, ``Locked``."""
        ...

    async def exists(self, run_id: str) -> bool: ...

    def iter_records(self, run_id: str, from_seq: int = 1) -> AsyncIterator[Record]:
        """Records with seq >= from_seq in order; a torn final line is not returned.
        Interior damage raises ``StoreCorrupted``; a missing run ``SessionNotFound``."""
        ...

    async def load(self, run_id: str, from_seq: int = 1) -> list[Record]: ...

    async def info(self, run_id: str) -> RunInfo: ...

    async def list(self) -> list[RunInfo]:
        """Every run, newest (by updated) first; invalid directory names are skipped."""
        ...

    async def delete(self, run_id: str) -> bool:
        """Remove a run; False if it did not exist. Refused with ``Locked`` while open."""
        ...

    async def verify(self, run_id: str) -> VerifyReport:
        """Walk the whole hash chain and every record's schema."""
        ...

    async def recover(self, run_id: str, *, check: RecordCheck | None = None) -> QuarantineReport:
        """Move damaged records out of the run into the store's quarantine directory and
        record the hole in it (a rebase with reason ``quarantine``, which ``check`` refuses
        before anything moves: the daemon passes its gate; without one, the schema alone);
        ``Locked`` while a writer holds the run, ``Unsupported`` on a backend without
        recovery."""
        ...

    async def close(self) -> None: ...


class HostLeases(Protocol):
    """Who holds each run across every daemon on shared storage (docs/design.md#leases): the
    JetStream backend's lease bucket. A backend without one (file, memory) keeps runs on one
    host, where the daemon's lease table and its locks suffice."""

    on_lost: Callable[[list[str]], None] | None

    async def acquire(self, run_id: str, holder: Mapping[str, Any]) -> int: ...

    async def release(self, run_id: str) -> None: ...

    async def refuse_if_held_elsewhere(self, run_id: str) -> None: ...
