"""A Hypothesis state machine over a real daemon subprocess, through its unix socket.

Each example starts ``journald serve`` (file backend, temp data dir) and drives it with raw
gRPC calls on three runs: Open (create or resume), Append (new records, a retry of
acknowledged ones, other bytes at an acknowledged seq), an append under a lease that ended,
Release, closing the Open stream without Release, a terminal record (after which a resume is
refused with ``completed``), a restart by SIGTERM (every lease stream ends with ``shutdown``),
a restart by kill -9 of the daemon's pid, and a kill -9 while an append is in flight (the
append is then in doubt: after the restart the run holds it or not, and nothing else).

After every step, through the socket: ``Load`` returns the acknowledged records (the exact
canonical bytes the model computed for them, hence their hashes), ``Fold`` equals the fold of
those records, ``Verify`` reaches the last one, and ``List`` names exactly the model's runs.

Replay a failure as for the store machine (``tests/storage/store_machine.py``): the printed
``JOURNALD_MACHINE_SEED`` or the ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from journald_client.pb import journal_pb2 as pb

from journald.core.fold import fold
from journald.core.records import Record, decode, make_record
from journald.server.convert import record_to_pb, state_to_pb
from tests.builders import TS, user_payload
from tests.daemon import Daemon
from tests.integration.rpc import Lease, error_of, stub, until_unlocked
from tests.storage.run_model import RunModel, next_records
from tests.waiting import wait_until

RUN_IDS = ("d1", "d2", "d3")
RPC_TIMEOUT_S = 60.0  # a deadline, not a wait: generous for two suites side by side
pick = st.integers(0, len(RUN_IDS) - 1)
choices = st.lists(st.sampled_from(["text", "calls", "user"]), min_size=1, max_size=3)


@dataclass
class DaemonRun:
    model: RunModel
    lease: Lease | None = None
    must_wait: bool = False  # its stream was cancelled: the lease ends a moment later

    @property
    def completed(self) -> bool:
        return self.model.state.completed


def refusal(call: Callable[[], object], what: str) -> str:
    """The journald error code ``call`` fails with; it must fail."""
    try:
        call()
    except grpc.RpcError as exc:
        return error_of(exc).code
    raise AssertionError(f"{what} succeeded")


class DaemonMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="jd-daemon-machine-"))
        self.daemon = Daemon(self.tmp, "file").start()
        self.stub = stub(self.daemon.target)
        self.runs: dict[str, DaemonRun] = {}
        self.stale: list[tuple[str, str]] = []  # (run, lease id) of leases that ended

    def teardown(self) -> None:
        for r in self.runs.values():
            if r.lease is not None:
                r.lease.close()
        try:
            self.daemon.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------

    def held(self) -> list[str]:
        return [r for r in sorted(self.runs) if self.runs[r].lease is not None]

    def openable(self) -> list[str]:
        return [r for r in RUN_IDS if r not in self.held()]

    def send(self, r: DaemonRun, records: list[Record]) -> pb.AppendResponse:
        assert r.lease is not None
        resp: pb.AppendResponse = self.stub.Append(
            pb.AppendRequest(
                run_id=r.model.state.run_id,
                lease_id=r.lease.lease.lease_id,
                records=[record_to_pb(x) for x in records],
            ),
            timeout=RPC_TIMEOUT_S,
        )
        return resp

    def append_ok(self, r: DaemonRun, records: list[Record], new_from: int = 0) -> None:
        acks = self.send(r, records).acks
        assert [(a.seq, a.hash, a.duplicate) for a in acks] == [
            (x.seq, x.hash, i < new_from) for i, x in enumerate(records)
        ], "the daemon's canonical bytes differ from the model's (or a wrong duplicate flag)"
        r.model.acknowledge(records[new_from:])

    def loaded(self, run_id: str) -> list[Record]:
        return [
            decode(x.record.canonical)
            for x in self.stub.Load(pb.LoadRequest(run_id=run_id), timeout=RPC_TIMEOUT_S)
        ]

    def lease_ended(self, r: DaemonRun) -> None:
        assert r.lease is not None
        self.stale.append((r.model.state.run_id, r.lease.lease.lease_id))
        r.lease = None

    def restarted(self) -> None:
        self.stub = stub(self.daemon.target)
        for r in self.runs.values():
            if r.lease is not None:
                r.lease.close()
                self.lease_ended(r)
            r.must_wait = False

    # -- leases ------------------------------------------------------------------------------

    @initialize()
    def first_run(self) -> None:
        self.open_run(0)

    @precondition(lambda self: self.openable())
    @rule(i=pick)
    def open_run(self, i: int) -> None:
        run_id = self.openable()[i % len(self.openable())]
        r = self.runs.get(run_id)
        if r is not None and r.completed:
            code = refusal(
                lambda: until_unlocked(lambda: Lease(self.stub, run_id, mode=pb.OPEN_MODE_RESUME)),
                f"a resume of the completed run {run_id}",
            )
            assert code == "completed"
            event("open refused: completed")
            return
        if r is not None and r.must_wait:  # the lease of a cancelled stream ends soon
            lease = until_unlocked(lambda: Lease(self.stub, run_id))
        else:
            lease = Lease(self.stub, run_id)  # a released run reopens at once
        if r is None:
            meta = self.loaded(run_id)[0]
            assert lease.lease.created
            assert (lease.lease.last_seq, lease.lease.last_hash) == (1, meta.hash)
            r = self.runs[run_id] = DaemonRun(RunModel([meta], fold([meta])))
            event("open: created")
        else:
            assert not lease.lease.created
            event("open: resumed")
        r.lease, r.must_wait = lease, False
        assert (lease.lease.last_seq, lease.lease.last_hash) == (
            r.model.last_seq,
            r.model.last_hash,
        )
        assert lease.lease.state == state_to_pb(r.model.state), "the lease's state is not the fold"

    @precondition(lambda self: self.held())
    @rule(i=pick)
    def open_a_held_run_is_locked(self, i: int) -> None:
        run_id = self.held()[i % len(self.held())]
        second = refusal(
            lambda: Lease(self.stub, run_id, mode=pb.OPEN_MODE_RESUME), f"a second Open of {run_id}"
        )
        assert second == "locked"

    @precondition(lambda self: self.held())
    @rule(i=pick)
    def release(self, i: int) -> None:
        r = self.runs[self.held()[i % len(self.held())]]
        assert r.lease is not None
        resp = self.stub.Release(
            pb.ReleaseRequest(run_id=r.model.state.run_id, lease_id=r.lease.lease.lease_id),
            timeout=RPC_TIMEOUT_S,
        )
        assert resp.released
        ended = [e.ended.reason for e in r.lease.call if e.HasField("ended")]
        assert ended == ["released"]
        self.lease_ended(r)

    @precondition(lambda self: self.held())
    @rule(i=pick)
    def close_stream(self, i: int) -> None:
        r = self.runs[self.held()[i % len(self.held())]]
        assert r.lease is not None
        r.lease.close()
        r.lease, r.must_wait = None, True  # ends a moment later: not yet a stale lease id

    @precondition(lambda self: self.stale)
    @rule(i=st.integers(0, 5))
    def append_with_an_ended_lease_is_lease_lost(self, i: int) -> None:
        run_id, lease_id = self.stale[i % len(self.stale)]
        r = self.runs[run_id]
        rec = next_records(r.model, ["user"])[0]
        request = pb.AppendRequest(run_id=run_id, lease_id=lease_id, records=[record_to_pb(rec)])
        code = refusal(
            lambda: self.stub.Append(request, timeout=RPC_TIMEOUT_S),
            f"an append under the ended lease {lease_id}",
        )
        assert code == "lease_lost"

    # -- appends ---------------------------------------------------------------------------

    @precondition(lambda self: self.held())
    @rule(i=pick, what=choices)
    def append(self, i: int, what: list[str]) -> None:
        r = self.runs[self.held()[i % len(self.held())]]
        self.append_ok(r, next_records(r.model, what))
        event("append")

    @precondition(lambda self: self.held())
    @rule(i=pick, back=st.integers(0, 4), extend=st.booleans())
    def retry(self, i: int, back: int, extend: bool) -> None:
        """The last few acknowledged records again (as after a lost ack), alone or followed
        by new ones: the old ones are duplicates with the stored hashes."""
        r = self.runs[self.held()[i % len(self.held())]]
        old = r.model.records[max(1, len(r.model.records) - 1 - back) :]
        if not old:
            return
        new = next_records(r.model, ["text"]) if extend else []
        self.append_ok(r, old + new, new_from=len(old))
        event("retry")

    @precondition(lambda self: self.held())
    @rule(i=pick, back=st.integers(0, 4))
    def other_bytes_at_an_acknowledged_seq_conflict(self, i: int, back: int) -> None:
        r = self.runs[self.held()[i % len(self.held())]]
        if len(r.model.records) < 2:
            return
        old = r.model.records[max(1, len(r.model.records) - 1 - back)]
        other = make_record(old.seq, "user", user_payload("other bytes"), old.prev, TS)
        code = refusal(lambda: self.send(r, [other]), f"other bytes at seq {old.seq}")
        assert code == "seq_conflict"

    @precondition(lambda self: self.held())
    @rule(i=pick)
    def complete(self, i: int) -> None:
        r = self.runs[self.held()[i % len(self.held())]]
        self.append_ok(r, next_records(r.model, ["terminal"]))
        event("completed")

    # -- the daemon's life -------------------------------------------------------------------

    @rule(how=st.sampled_from(["sigterm", "kill -9"]))
    def restart(self, how: str) -> None:
        """The daemon stops (SIGTERM: every lease stream ends with ``shutdown``) or is killed
        (kill -9 of its pid), then starts again on the same data."""
        if how == "sigterm":
            assert self.daemon.stop() == 0
            for r in self.runs.values():
                if r.lease is not None:
                    ended = [e.ended.reason for e in r.lease.call if e.HasField("ended")]
                    assert ended == ["shutdown"], ended
        else:
            self.daemon.kill9()
        self.daemon.start()
        self.restarted()
        event(f"restart: {how}")

    @precondition(lambda self: self.held())
    @rule(i=pick, what=choices, after_the_write=st.booleans())
    def kill9_during_an_append(self, i: int, what: list[str], after_the_write: bool) -> None:
        """kill -9 while an append is in flight (at once, or once its bytes reached the run's
        file): it may or may not be stored, but if it was acknowledged it must be."""
        r = self.runs[self.held()[i % len(self.held())]]
        assert r.lease is not None
        run_id = r.model.state.run_id
        active = self.daemon.data_dir / "sessions" / run_id / "journal.jsonl"
        size = active.stat().st_size
        records = next_records(r.model, what)
        future = self.stub.Append.future(
            pb.AppendRequest(
                run_id=run_id,
                lease_id=r.lease.lease.lease_id,
                records=[record_to_pb(x) for x in records],
            ),
            timeout=RPC_TIMEOUT_S,
        )
        if after_the_write:
            wait_until(
                lambda: future.done() or active.stat().st_size != size,
                what=f"the append to {run_id} to reach its file",
            )
        self.daemon.kill9()
        try:
            acked = len(future.result().acks)
        except grpc.RpcError:
            acked = 0
        self.daemon.start()
        self.restarted()
        stored = self.loaded(run_id)[len(r.model.records) :]
        assert [x.raw for x in stored] == [x.raw for x in records[: len(stored)]]
        assert len(stored) >= acked, "an acknowledged record was lost in the kill"
        r.model.acknowledge(stored)
        event(f"kill -9 during an append: {acked} acknowledged, {len(stored)} stored")

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def load_and_fold_are_the_acknowledged_records(self) -> None:
        for run_id, r in self.runs.items():
            loaded = self.loaded(run_id)
            assert [x.raw for x in loaded] == [x.raw for x in r.model.records], run_id
            state = self.stub.Fold(pb.FoldRequest(run_id=run_id), timeout=RPC_TIMEOUT_S).state
            assert state == state_to_pb(r.model.state), f"{run_id}: Fold is not the model's"

    @invariant()
    def verify_reaches_the_last_acknowledged_record(self) -> None:
        for run_id, r in self.runs.items():
            resp = self.stub.Verify(pb.VerifyRequest(run_id=run_id), timeout=RPC_TIMEOUT_S)
            assert (resp.last_seq, resp.last_hash) == (r.model.last_seq, r.model.last_hash)

    @invariant()
    def list_names_exactly_the_runs(self) -> None:
        listed = self.stub.List(pb.ListRequest(), timeout=RPC_TIMEOUT_S).runs
        assert sorted(x.run_id for x in listed) == sorted(self.runs)
