"""The one walk ``Store.verify`` makes over a run, whatever keeps its records.

Each record, in order: its bytes are canonical (re-encoding them gives the same bytes, so the
hash every reader computes is the one written), it matches its record schema, its seq follows
the one before (or is an allowed jump: a prune or quarantine anchor of the file backend), and
its ``prev`` is the hash of the record before. Backends differ only in where the records come
from and how they name a damaged place (the file backend names file and line), so a record a
writer bug stored against its schema fails ``verify`` on every backend alike. See
docs/design.md#storage-protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable

from journald.core.errors import JournaldError, SessionNotFound, StoreCorrupted
from journald.core.records import GENESIS, Record, decode
from journald.core.schema import validate_record
from journald.storage.base import VerifyReport


def record_problem(rec: Record) -> str | None:
    """What is wrong with one record on its own (not canonical, against its schema), or
    None: the check every backend's ``verify`` gives each record."""
    try:
        decode(rec.raw)  # refuses bytes that are not canonical
        validate_record(rec)
    except JournaldError as exc:
        return f"not a valid record ({exc.message})"
    return None


Damage = Callable[[Record, int, str], JournaldError]
"""Builds the error for a damaged record: (record, the seq expected there, what is wrong)."""


def _damaged(run_id: str) -> Damage:
    def build(rec: Record, seq: int, what: str) -> JournaldError:
        return StoreCorrupted(
            f"run {run_id}: record seq {seq}: {what}. The run is damaged and is not read as "
            "a shorter or altered history; restore it from a backup",
            metadata={"run_id": run_id, "seq": seq, "reason": what},
        )

    return build


class VerifyWalk:
    """Feed a run's records in order to ``add``; ``report`` once they are all in."""

    def __init__(
        self,
        run_id: str,
        damaged: Damage | None = None,
        start_seq: int = 0,
        start_hash: str = GENESIS,
    ) -> None:
        self.run_id = run_id
        self._damaged = damaged or _damaged(run_id)
        self.seq = start_seq
        self.hash = start_hash
        self.records = 0

    def add(self, rec: Record, jumped: bool = False) -> None:
        """Check ``rec`` as the next record (``jumped``: the store vouches for a seq jump
        before it, and its ``prev`` was checked against the jump's anchor)."""
        expected = self.seq + 1
        problem = record_problem(rec)
        if problem is not None:
            raise self._damaged(rec, expected, problem)
        if not jumped:
            if rec.seq != expected:
                raise self._damaged(rec, expected, f"seq {rec.seq} found where {expected} belongs")
            if rec.prev != self.hash:
                what = f"hash chain breaks: prev does not match the hash of seq {self.seq}"
                raise self._damaged(rec, rec.seq, what)
        self.seq, self.hash = rec.seq, rec.hash
        self.records += 1

    def report(self, segments: int = 1) -> VerifyReport:
        if not self.records:
            raise SessionNotFound(
                f"run {self.run_id} does not exist; list runs with `journald ls`",
                metadata={"run_id": self.run_id},
            )
        return VerifyReport(self.records, self.seq, self.hash, segments)


def verify_records(run_id: str, records: Iterable[Record]) -> VerifyReport:
    walk = VerifyWalk(run_id)
    for rec in records:
        walk.add(rec)
    return walk.report()


async def verify_stream(run_id: str, records: AsyncIterable[Record]) -> VerifyReport:
    walk = VerifyWalk(run_id)
    async for rec in records:
        walk.add(rec)
    return walk.report()
