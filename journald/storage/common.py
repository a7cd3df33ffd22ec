"""Append planning shared by every backend (docs/protocol.md#seq-rules applied to a batch)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence

from journald.core.errors import InvalidRecord, SeqGap
from journald.core.records import APPEND, Record, check_append, make_record


def relink(rec: Record, prev: str) -> Record:
    if rec.prev == prev:
        return rec
    return make_record(rec.seq, rec.kind, rec.payload, prev, rec.ts, rec.trace)


def plan_append(
    records: Sequence[Record],
    last_seq: int,
    last_hash: str,
    stored: Mapping[int, Record],
    run_id: str,
) -> tuple[list[Record], list[Record]]:
    """Split a batch into (already stored duplicates, new records linked onto the chain).

    ``stored`` must hold the stored record for every batch seq <= ``last_seq``. Raises
    ``SeqGap``/``SeqConflict`` for the first record that breaks the rules; nothing is
    written in that case.
    """
    if not records:
        raise InvalidRecord("an append needs at least one record")
    for a, b in itertools.pairwise(records):
        if b.seq != a.seq + 1:
            raise InvalidRecord(
                f"a batch needs consecutive seqs; seq {b.seq} follows {a.seq}",
                metadata={"seq": b.seq},
            )
    dups: list[Record] = []
    new: list[Record] = []
    prev = last_hash
    for rec in records:
        if rec.seq <= last_seq:
            have = stored[rec.seq]
            check_append(last_seq, rec.seq, have.hash, relink(rec, have.prev).hash, run_id)
            dups.append(have)
            continue
        expected = last_seq + 1 + len(new)
        if check_append(expected - 1, rec.seq, None, "", run_id) == APPEND:
            linked = relink(rec, prev)
            new.append(linked)
            prev = linked.hash
    return dups, new


class SeqTurnstile:
    """Lets appends that arrive out of order on one journal wait for their turn.

    ``await wait_for(seq)`` returns once every earlier seq has been accepted (``advance``),
    or raises ``SeqGap`` after ``timeout_s``.
    """

    def __init__(self, next_seq: int) -> None:
        self.next_seq = next_seq
        self._cond = asyncio.Condition()

    async def wait_for(self, seq: int, timeout_s: float, run_id: str) -> None:
        if seq <= self.next_seq:
            return
        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(lambda: seq <= self.next_seq), timeout_s)
            except TimeoutError:
                raise SeqGap(
                    f"run {run_id}: append at seq {seq} but the next seq is {self.next_seq} "
                    f"and it did not arrive within {timeout_s}s; append seq {self.next_seq} "
                    "first (reload the run to resync)",
                    metadata={"run_id": run_id, "seq": seq, "next_seq": self.next_seq},
                ) from None

    async def reset(self, next_seq: int) -> None:
        """Move back to ``next_seq`` (a queued write failed: everything after it is void)."""
        async with self._cond:
            self.next_seq = next_seq
            self._cond.notify_all()

    async def advance(self, next_seq: int) -> None:
        async with self._cond:
            self.next_seq = max(self.next_seq, next_seq)
            self._cond.notify_all()
