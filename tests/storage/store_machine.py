"""A Hypothesis state machine over the ``Store`` protocol, run against every backend.

Hypothesis draws long sequences of operations on three runs (``r1``..``r3``) and checks them
against a model that holds, per run, the records the store acknowledged and the state a lease
would cache (each acknowledged batch folded into the previous state). Rules: create, open,
close; append (new records, a retry of acknowledged ones, a retry with other bytes, a batch
that overlaps the end, a gap); compaction and restore as rebase records (a checkpoint of the
folded conversation taken into the backend's checkpoint store, then restored); fork into a new
run; delete; a clean restart of the store; a crash (the store abandoned as a killed daemon
leaves it, then opened again over the same data); a write that fails or stops half way at a
named failpoint (``journald.failpoints``), then a retry or a crash; a torn write (file: bytes
of a record cut short at the end of the active segment, then a crash).

After every step: ``load`` returns the acknowledged records byte for byte, ``verify`` walks the
chain to the model's last record, ``fold(load)`` equals the cached state, every open journal
is at the model's head, ``list`` names exactly the model's runs, and (file) a second store
opened over the same directory, as a process starting after a crash would, loads the same.

A write whose outcome the caller never learned (a crash mid-way) is *in doubt*: after the
crash the store may hold any prefix of it; the model adopts what is there and checks that it
is exactly a prefix of what was sent.

Replaying a failure: the test prints ``replay: JOURNALD_MACHINE_SEED=<n> pytest <test id>``;
that seed runs the same examples again. Hypothesis also prints the shrunk steps as Python
(``state = ...; state.append(...)``) and an ``@reproduce_failure(...)`` line: put that
decorator on the machine class (``run_state_machine_as_test`` honours it) to replay exactly
the shrunk case.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from journald import failpoints
from journald.core.checkpoints import governed
from journald.core.errors import (
    JournaldError,
    Locked,
    SeqConflict,
    SeqGap,
    SessionExists,
    SessionNotFound,
)
from journald.core.fold import fold
from journald.core.paging import tail_start
from journald.core.records import Record, make_record
from journald.storage.base import Store
from journald.storage.checkpoint_base import make_checkpoint
from tests.builders import TS, text, user_payload
from tests.storage.machine_backends import BACKENDS, Backend, MemoryBackend
from tests.storage.run_model import CHOICES, RunModel, meta_record, next_records

T = TypeVar("T")
RUN_IDS = ("r1", "r2", "r3")


# --- the machine -----------------------------------------------------------------------------

pick = st.integers(0, len(RUN_IDS) - 1)
"""Which of the runs a rule applies to is (pick mod their number): shrinks towards the first."""
choices = st.lists(st.sampled_from(CHOICES), min_size=1, max_size=3)


def chosen(ids: list[str], i: int) -> str:
    return ids[i % len(ids)]


class StoreMachine(RuleBasedStateMachine):
    """Subclassed per backend by ``machine_for`` (``backend`` set on the subclass)."""

    backend: type[Backend] = MemoryBackend
    armed = ""
    """Failpoints armed for the whole run (a wrong variant the machine must catch)."""

    def __init__(self) -> None:
        super().__init__()
        failpoints.arm(self.armed)
        self.loop = asyncio.new_event_loop()
        self.be = self.backend()
        self.store: Store = self.run(self.be.start())
        self.model: dict[str, RunModel] = {}

    def run(self, coro: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        failpoints.disarm()
        try:
            with contextlib.suppress(Exception):
                self.run(self.store.close())
            self.run(self.be.cleanup())
        finally:
            self.loop.close()

    # -- which runs a rule can apply to ------------------------------------------------------

    def missing(self) -> list[str]:
        return [r for r in RUN_IDS if r not in self.model]

    def existing(self) -> list[str]:
        return sorted(self.model)

    def held(self) -> list[str]:
        """Runs with an open journal."""
        return [r for r in sorted(self.model) if self.model[r].journal is not None]

    def idle_held(self) -> list[str]:
        """Held runs without a tool call waiting for its result (compaction, restore)."""
        return [r for r in self.held() if self.model[r].state.pending is None]

    def released(self) -> list[str]:
        return [r for r in sorted(self.model) if self.model[r].journal is None]

    # -- helpers ---------------------------------------------------------------------------

    def append_ok(self, m: RunModel, batch: list[Record], new_from: int = 0) -> None:
        """Append ``batch`` (its first ``new_from`` records already acknowledged): every
        result names its record's seq and hash; only the new ones are not duplicates."""
        assert m.journal is not None
        results = self.run(m.journal.append(batch))
        assert [(r.seq, r.hash) for r in results] == [(r.seq, r.hash) for r in batch]
        assert [r.duplicate for r in results] == [i < new_from for i in range(len(batch))]
        assert {r.durability for r in results} == {self.store.durability}
        m.acknowledge(batch[new_from:])

    def refused(
        self, op: Awaitable[object], errors: tuple[type[Exception], ...], what: str
    ) -> None:
        """``op`` must fail with one of ``errors``."""
        try:
            self.run(op)
        except errors:
            return
        raise AssertionError(f"{what} succeeded; it must fail with {errors}")

    def forget_journals(self) -> None:
        for m in self.model.values():
            m.journal = None

    def adopt_in_doubt(self, m: RunModel, sent: list[Record], failed: bool) -> int:
        """After a crash, the run holds the acknowledged records plus a prefix of ``sent``
        (none of it when the write ``failed`` and the backend undoes failed writes)."""
        loaded = self.run(self.store.load(m.records[0].payload["run_id"]))
        assert [r.raw for r in loaded[: len(m.records)]] == [r.raw for r in m.records], (
            "an acknowledged record was lost in the crash"
        )
        extra = loaded[len(m.records) :]
        assert [r.raw for r in extra] == [r.raw for r in sent[: len(extra)]]
        if failed and self.be.undoes_failed_writes:
            assert not extra, "a write that failed was kept"
        m.acknowledge(extra)
        return len(extra)

    def new_run(self, run_id: str, meta: Record) -> RunModel:
        journal = self.run(self.store.create(meta))
        assert (journal.last_seq, journal.last_hash) == (1, meta.hash)
        m = self.model[run_id] = RunModel([meta], fold([meta]), journal)
        return m

    # -- lifecycle -------------------------------------------------------------------------

    @initialize()
    def first_run(self) -> None:
        self.new_run(RUN_IDS[0], meta_record(RUN_IDS[0]))

    @precondition(lambda self: self.missing())
    @rule(i=pick)
    def create(self, i: int) -> None:
        run_id = chosen(self.missing(), i)
        self.new_run(run_id, meta_record(run_id))
        event("create")

    @precondition(lambda self: self.existing())
    @rule(i=pick)
    def create_an_existing_run_is_refused(self, i: int) -> None:
        run_id = chosen(self.existing(), i)
        self.refused(self.store.create(meta_record(run_id)), (SessionExists, Locked), "create")

    @precondition(lambda self: self.released())
    @rule(i=pick)
    def open_run(self, i: int) -> None:
        m = self.model[chosen(self.released(), i)]
        m.journal = self.run(self.store.open(m.state.run_id))
        assert (m.journal.last_seq, m.journal.last_hash) == (m.last_seq, m.last_hash)
        assert (m.journal.repair is not None) == m.torn, "a torn tail is repaired on open"
        event("open, repairing a torn tail" if m.torn else "open")
        m.torn = False

    @rule(i=pick)
    def open_a_held_or_missing_run_is_refused(self, i: int) -> None:
        run_id = RUN_IDS[i]
        m = self.model.get(run_id)
        if m is not None and m.journal is None:
            return
        refusal = SessionNotFound if m is None else Locked
        self.refused(self.store.open(run_id), (refusal,), f"open of {run_id}")
        event(f"open refused: {refusal.__name__}")

    @precondition(lambda self: self.held())
    @rule(i=pick)
    def close_run(self, i: int) -> None:
        m = self.model[chosen(self.held(), i)]
        assert m.journal is not None
        self.run(m.journal.close())
        m.journal = None

    @precondition(lambda self: self.released())
    @rule(i=pick)
    def delete(self, i: int) -> None:
        run_id = chosen(self.released(), i)
        assert self.run(self.store.delete(run_id)) is True
        self.run(self.be.checkpoints.drop_run(run_id))
        del self.model[run_id]
        event("delete")

    @rule(i=pick)
    def delete_a_held_or_missing_run(self, i: int) -> None:
        run_id = RUN_IDS[i]
        m = self.model.get(run_id)
        if m is None:
            assert self.run(self.store.delete(run_id)) is False
        elif m.journal is not None:
            self.refused(self.store.delete(run_id), (Locked,), f"delete of the open {run_id}")

    @rule()
    def restart(self) -> None:
        if not self.be.durable:  # the store object survives: its journals end with the daemon
            for m in self.model.values():
                if m.journal is not None:
                    self.run(m.journal.close())
        self.store = self.run(self.be.restart(self.store))
        self.forget_journals()

    @precondition(lambda self: self.be.durable)
    @rule()
    def crash(self) -> None:
        self.store = self.run(self.be.crash(self.store))
        self.forget_journals()

    # -- appends ---------------------------------------------------------------------------

    @precondition(lambda self: self.held())
    @rule(i=pick, what=choices, overlap=st.booleans())
    def append(self, i: int, what: list[str], overlap: bool) -> None:
        m = self.model[chosen(self.held(), i)]
        batch = next_records(m, what)
        if overlap:  # a retry that also carries new records: the old one is a duplicate
            self.append_ok(m, [m.records[-1], *batch], new_from=1)
        else:
            self.append_ok(m, batch)
        event(f"append of {len(batch)}")

    @precondition(lambda self: self.held())
    @rule(i=pick, back=st.integers(0, 6), length=st.integers(1, 3))
    def retry_identical(self, i: int, back: int, length: int) -> None:
        m = self.model[chosen(self.held(), i)]
        start = max(0, len(m.records) - 1 - back)
        batch = m.records[start : start + length]
        self.append_ok(m, batch, new_from=len(batch))
        event("retry of acknowledged records")

    @precondition(lambda self: self.held())
    @rule(i=pick, back=st.integers(0, 6))
    def retry_different(self, i: int, back: int) -> None:
        m = self.model[chosen(self.held(), i)]
        old = m.records[max(0, len(m.records) - 1 - back)]
        other = make_record(old.seq, "user", user_payload("other bytes"), old.prev, TS)
        assert m.journal is not None
        self.refused(m.journal.append([other]), (SeqConflict,), f"other bytes at seq {old.seq}")
        event("seq conflict")

    @precondition(lambda self: self.held())
    @rule(i=pick)
    def append_after_a_gap(self, i: int) -> None:
        m = self.model[chosen(self.held(), i)]
        ahead = next_records(m, ["user", "user"])[1]
        assert m.journal is not None
        self.refused(m.journal.append([ahead]), (SeqGap,), f"seq {ahead.seq} after {m.last_seq}")
        event("seq gap")

    # -- rebases, checkpoints, forks ----------------------------------------------------------

    def rebase(
        self, m: RunModel, reason: str, messages: list[dict[str, Any]], **extra: Any
    ) -> None:
        payload: dict[str, Any] = {"reason": reason, "messages": messages, **extra}
        rec = make_record(m.last_seq + 1, "rebase", payload, m.last_hash, TS)
        self.append_ok(m, [rec])
        event(f"rebase: {reason}")
        assert m.state.messages == messages, "a rebase replaces the conversation"

    @precondition(lambda self: self.idle_held())
    @rule(i=pick, keep_last=st.integers(0, 4))
    def compact(self, i: int, keep_last: int) -> None:
        m = self.model[chosen(self.idle_held(), i)]
        msgs = governed(m.state.messages)
        summary = {"role": "user", "content": [text(f"summary up to seq {m.last_seq}")]}
        new = governed([summary, *msgs[tail_start(msgs, keep_last) :]])
        covered = {"from_seq": 1, "to_seq": m.last_seq}
        self.rebase(m, "compaction", new, covered=covered)

    @precondition(lambda self: self.existing())
    @rule(i=pick)
    def checkpoint(self, i: int) -> None:
        m = self.model[chosen(self.existing(), i)]
        if m.state.pending is not None:
            return
        cp = make_checkpoint(
            run_id=m.state.run_id,
            trigger="manual",
            label=f"at seq {m.last_seq}",
            seq=m.last_seq,
            messages=m.state.messages,
            created=TS,
            model="claude-test",
            cwd="",
        )
        self.run(self.be.checkpoints.put(cp))
        m.checkpoints.append(cp)
        event("checkpoint")

    @precondition(lambda self: any(self.model[r].checkpoints for r in self.idle_held()))
    @rule(i=pick, which=st.integers(0, 3))
    def restore(self, i: int, which: int) -> None:
        m = self.model[chosen([r for r in self.idle_held() if self.model[r].checkpoints], i)]
        want = m.checkpoints[-1 - min(which, len(m.checkpoints) - 1)]
        cp = self.run(self.be.checkpoints.get(m.state.run_id, want.checkpoint_id))
        assert (cp.meta, cp.messages) == (want.meta, want.messages)
        self.rebase(
            m,
            "restore",
            governed(cp.messages),
            checkpoint_id=cp.checkpoint_id,
            checkpoint_hash=cp.meta.hash,
            covered={"from_seq": 1, "to_seq": m.last_seq},
        )

    @precondition(lambda self: self.existing() and self.missing())
    @rule(i=pick, j=pick)
    def fork(self, i: int, j: int) -> None:
        source, into = chosen(self.existing(), i), chosen(self.missing(), j)
        src = self.model[source]
        if src.state.pending is not None:
            return
        lineage = {"forked_from_run_id": source, "forked_at_seq": src.last_seq}
        m = self.new_run(into, meta_record(into, lineage))
        self.rebase(m, "fork", governed(src.state.messages))
        assert m.state.lineage == lineage

    # -- failures ------------------------------------------------------------------------------

    @precondition(lambda self: self.be.crash_points and self.held())
    @rule(
        i=pick,
        point=st.integers(0, 2),
        action=st.sampled_from(["raise:EIO", "crash"]),
        what=choices,
        then_crash=st.booleans(),
    )
    def failed_write(
        self, i: int, point: int, action: str, what: list[str], then_crash: bool
    ) -> None:
        """An append fails (``raise``) or stops (``crash``) at a write-path failpoint. After a
        ``raise`` the same journal retries the batch, or the daemon crashes; after a ``crash``
        the daemon is gone. Either way nothing acknowledged may be lost, and what is stored of
        the failed batch is a prefix of it."""
        m = self.model[chosen(self.held(), i)]
        assert m.journal is not None
        name = self.be.crash_points[point % len(self.be.crash_points)]
        batch = next_records(m, what)
        failpoints.arm(",".join(filter(None, [self.armed, f"{name}={action}@1"])))
        try:
            self.run(m.journal.append(batch))
            outcome: BaseException | None = None
        except (JournaldError, OSError, failpoints.Crash) as exc:
            outcome = exc
        finally:
            failpoints.arm(self.armed)
        if outcome is None:  # acknowledged despite the failpoint
            event(f"failed write: {name}={action} did not fire")
            m.acknowledge(batch)
            return
        stopped = isinstance(outcome, failpoints.Crash)
        if stopped or then_crash:
            self.store = self.run(self.be.crash(self.store))
            self.forget_journals()
            kept = self.adopt_in_doubt(m, batch, failed=not stopped)
            event(f"failed write: {name}={action}, crash, {kept} of {len(batch)} kept")
        else:
            event(f"failed write: {name}={action}, retried")
            self.append_ok(m, batch)  # the retry of a failed append succeeds (or adopts it)

    @precondition(lambda self: self.be.tearable and any(not m.torn for m in self.model.values()))
    @rule(i=pick, cut=st.integers(2, 400), zeros=st.booleans())
    def torn_write(self, i: int, cut: int, zeros: bool) -> None:
        """The daemon dies while writing a record, as a crash really leaves it: a kill leaves
        the first ``cut`` bytes of the line (never its newline); a power cut can leave the
        line's sectors zero-filled. Then it starts again. (A complete line with changed bytes
        is damage, not a tear: tests/faults/file/test_file_tail_flips.py.)"""
        run_id = chosen([r for r in self.existing() if not self.model[r].torn], i)
        m = self.model[run_id]
        self.store = self.run(self.be.crash(self.store))
        self.forget_journals()
        raw = next_records(m, ["text"])[0].raw
        junk = b"\0" * cut if zeros else raw[: min(cut, len(raw) - 1)]
        with open(self.be.active_segment(self.store, run_id), "ab") as f:
            f.write(junk)
        m.torn = True
        event("torn write")

    # -- invariants ------------------------------------------------------------------------------

    def check_loads(self, store: Store) -> dict[str, list[Record]]:
        """Every run of the model loads as its acknowledged records; no other run exists."""
        out = {}
        for run_id in RUN_IDS:
            m = self.model.get(run_id)
            if m is None:
                assert not self.run(store.exists(run_id)), f"{run_id} should not exist"
                continue
            loaded = out[run_id] = self.run(store.load(run_id))
            assert [r.raw for r in loaded] == [r.raw for r in m.records], (
                f"{run_id}: the store does not hold exactly the acknowledged records"
            )
        return out

    @invariant()
    def load_is_the_acknowledged_records_and_folds_to_the_cached_state(self) -> None:
        for run_id, loaded in self.check_loads(self.store).items():
            assert fold(loaded) == self.model[run_id].state, f"{run_id}: fold(load) differs"

    @invariant()
    def the_chain_verifies_to_the_last_acknowledged_record(self) -> None:
        for run_id, m in self.model.items():
            report = self.run(self.store.verify(run_id))
            assert (report.records, report.last_seq, report.last_hash) == (
                len(m.records),
                m.last_seq,
                m.last_hash,
            )

    @invariant()
    def open_journals_are_at_the_acknowledged_head(self) -> None:
        for m in self.model.values():
            if m.journal is not None:
                assert (m.journal.last_seq, m.journal.last_hash) == (m.last_seq, m.last_hash)

    @invariant()
    def list_names_exactly_the_runs(self) -> None:
        assert sorted(i.run_id for i in self.run(self.store.list())) == sorted(self.model)

    @invariant()
    def acknowledged_records_survive_a_crash(self) -> None:
        reader = self.run(self.be.second_reader())
        if reader is not None:
            self.check_loads(reader)


def machine_for(backend: str) -> type[StoreMachine]:
    """The machine over one backend (a subclass, so Hypothesis keeps separate examples)."""
    return type(f"StoreMachine_{backend}", (StoreMachine,), {"backend": BACKENDS[backend]})
