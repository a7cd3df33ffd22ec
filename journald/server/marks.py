"""Fold marks: where a run's fold stood every ``MARK_EVERY`` records
(docs/design.md#history-paging).

A mark names a seq, the hash of the record there, how many messages the fold held and the role
of the last one; History folds a tail page from the newest usable mark instead of from seq 1.
Marks are taken by whoever folds the run as its writer (an Open, the daemon's own lease) and by
every commit, kept in memory while the lease lives, and saved through the checkpoint store's
``save_mark`` when the lease ends: a read never writes them.
"""

from __future__ import annotations

from typing import Any

from journald.core.fold import RunState
from journald.server.leases import Lease
from journald.storage.checkpoint_base import CheckpointStore

MARK_EVERY = 1000  # records between the fold marks History pages from
MARKS_KEPT = 256  # per run (the newest); older pages fold from the oldest kept or in full


def mark_of(st: RunState) -> dict[str, Any]:
    """A fold mark (``journald.core.paging.FoldMark``) of a state without an open turn, plus
    the hash of its last record (a mark is used only while that record is still at its seq)."""
    return {
        "seq": st.last_seq,
        "hash": st.last_hash,
        "messages": len(st.messages),
        "last_role": st.messages[-1]["role"] if st.messages else "",
    }


def mark_due(marks: list[dict[str, Any]], state: RunState) -> bool:
    """Whether a fold at ``state`` should take a mark (no turn open, ``MARK_EVERY`` apart)."""
    if state.pending is not None:
        return False
    return not marks or state.last_seq - marks[-1]["seq"] >= MARK_EVERY


class FoldMarks:
    """The marks of the runs held now (in memory) and the saved ones (in the checkpoint
    store)."""

    def __init__(self, checkpoints: CheckpointStore) -> None:
        self.checkpoints = checkpoints
        self._pending: dict[str, list[dict[str, Any]]] = {}

    def index_on_close(self, run_id: str, marks: list[dict[str, Any]]) -> None:
        """The marks a writer took while folding the run as it opened it: saved with the ones
        its commits take when its lease ends (``save_on_close``)."""
        self._pending[run_id] = list(marks)

    def note(self, run_id: str, state: RunState) -> None:
        """After a commit: remember a mark when one is due (in memory until the lease ends)."""
        marks = self._pending.setdefault(run_id, [])
        if mark_due(marks, state):
            marks.append(mark_of(state))

    async def save_on_close(self, lease: Lease) -> None:
        """Lease-close hook: persist the marks taken while the lease lived, and the last."""
        marks = self._pending.pop(lease.run_id, [])
        st = lease.state
        if st.pending is None and st.last_seq and (not marks or marks[-1]["seq"] != st.last_seq):
            marks.append(mark_of(st))
        if marks:
            old = await self.load(lease.run_id)
            first_new = marks[0]["seq"]
            kept = [m for m in old if m["seq"] < first_new] + marks
            await self.checkpoints.save_mark(lease.run_id, {"marks": kept[-MARKS_KEPT:]})

    async def load(self, run_id: str) -> list[dict[str, Any]]:
        """The saved marks of a run, oldest first (malformed entries are skipped)."""
        doc = await self.checkpoints.load_mark(run_id)
        marks = doc.get("marks") if doc else None
        ok = []
        for m in marks if isinstance(marks, list) else []:
            if (
                isinstance(m, dict)
                and type(m.get("seq")) is int
                and type(m.get("messages")) is int
                and isinstance(m.get("hash"), str)
                and isinstance(m.get("last_role"), str)
            ):
                ok.append(m)
        return sorted(ok, key=lambda m: m["seq"])
