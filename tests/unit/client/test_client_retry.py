"""The client's retry state machine (journald_client.retry), driven step by step with scripted
answers: the decisions the sync and the asyncio writer (and their pipelined writers) share."""

from __future__ import annotations

import os
import socket
from typing import Any

import journald_client as jc
import pytest
from journald_client import retry
from journald_client.codec import Entry, stamp
from journald_client.pb import journal_pb2 as pb

from tests.unit.client.test_own_records import stored_form

WRITER = retry.Writer("run-1", "unix:///tmp/x.sock", lambda: False)
RECORDS = stamp([Entry.user("a"), Entry.user("b")], 5)
ACKS = [jc.Ack(5, "h5", "fsync_local", False), jc.Ack(6, "h6", "fsync_local", False)]


class Script:
    """Answers each step with the next scripted answer (an exception is raised), checking
    that the step is of the expected kind."""

    def __init__(self, *answers: tuple[type, Any]) -> None:
        self.answers = list(answers)
        self.seen: list[retry.Step] = []

    def __call__(self, step: retry.Step) -> Any:
        assert self.answers, f"unexpected step {step!r}"
        kind, answer = self.answers.pop(0)
        assert isinstance(step, kind), f"wanted {kind.__name__}, got {step!r}"
        self.seen.append(step)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def stored(records: list[pb.Record]) -> list[pb.Record]:
    out = []
    for r in records:
        c = pb.Record()
        c.CopyFrom(r)
        c.hash = f"h{r.seq}"
        c.canonical = b"{}"
        out.append(c)
    return out


def test_a_refused_append_is_raised_at_once_without_a_retry() -> None:
    script = Script((retry.Call, jc.InvalidRecord("bad")))
    with pytest.raises(jc.InvalidRecord):
        retry.drive(retry.send(WRITER, RECORDS, 30.0), script)
    assert len(script.seen) == 1


def test_a_lost_lease_reopens_and_resends_the_same_append() -> None:
    script = Script(
        (retry.Call, jc.LeaseLost("gone")),
        (retry.CancelLease, None),
        (retry.Probe, True),
        (retry.Reopen, 5),  # the daemon had stored seq 5 already: resent, answered duplicate
        (retry.Call, ACKS),
    )
    assert retry.drive(retry.send(WRITER, RECORDS, 30.0), script) == ACKS
    assert script.answers == []


def test_a_busy_backend_is_retried_in_place_without_reopening() -> None:
    script = Script(
        (retry.Call, jc.BackendUnavailable("busy")),
        (retry.Sleep, None),
        (retry.Call, ACKS),
    )
    assert retry.drive(retry.send(WRITER, RECORDS, 30.0), script) == ACKS


def test_a_reopened_lease_missing_acknowledged_records_is_store_corrupted() -> None:
    script = Script(
        (retry.Call, jc.DaemonUnavailable("down")),
        (retry.CancelLease, None),
        (retry.Probe, True),
        (retry.Reopen, 3),  # seq 4 was acknowledged before this append of 5..6
    )
    with pytest.raises(jc.StoreCorrupted, match="acknowledged records are missing"):
        retry.drive(retry.send(WRITER, RECORDS, 30.0), script)


@pytest.mark.parametrize("theirs", [False, True])
def test_a_completed_run_adopts_the_append_only_when_the_stored_records_are_ours(
    theirs: bool,
) -> None:
    other = stamp([Entry.user("a"), Entry.user("something else")], 5)
    script = Script(
        (retry.Call, jc.LeaseLost("gone")),
        (retry.CancelLease, None),
        (retry.Probe, True),
        (retry.Reopen, jc.Completed("done")),
        (retry.Load, stored(other if theirs else RECORDS)),
    )
    if theirs:
        with pytest.raises(jc.Completed):
            retry.drive(retry.send(WRITER, RECORDS, 30.0), script)
        return
    acks = retry.drive(retry.send(WRITER, RECORDS, 30.0), script)
    assert [(a.seq, a.hash, a.duplicate) for a in acks] == [(5, "h5", True), (6, "h6", True)]


def test_a_completed_run_adopts_its_paged_edit_from_the_load_alone_without_reading_pages() -> None:
    sent = stamp(
        [
            Entry.rebase([{"role": "user", "content": "x" * 100_000}] * 4),
            Entry.terminal("completed"),
        ],
        5,
    )
    paged = [stored_form(r) for r in sent]
    assert paged[0].rebase.pages  # held as page references and a tail, unlike what was sent
    script = Script(
        (retry.Call, jc.LeaseLost("gone")),
        (retry.CancelLease, None),
        (retry.Probe, True),
        (retry.Reopen, jc.Completed("done")),
        (retry.Load, paged),
    )
    acks = retry.drive(retry.send(WRITER, sent, 30.0), script)
    assert [(a.seq, a.hash) for a in acks] == [(r.seq, r.hash) for r in paged]


def test_the_retry_budget_ends_a_reconnect_that_never_succeeds() -> None:
    now = [0.0]
    budget = retry.Budget(10.0, clock=lambda: now[0])

    def down(step: retry.Step) -> Any:
        now[0] += 1.0  # every step costs a second of the budget
        if isinstance(step, retry.Probe):
            return False
        return None

    steps = retry.recover(WRITER, jc.DaemonUnavailable("down"), budget, RECORDS)
    with pytest.raises(jc.DaemonUnavailable, match="reconnecting"):
        retry.drive(steps, down)
    assert now[0] <= 12.0


def test_a_writer_closed_during_a_reconnect_gives_up_with_lease_lost() -> None:
    closed = retry.Writer("run-1", "t", lambda: True)
    steps = retry.recover(closed, jc.LeaseLost("gone"), retry.Budget(30.0), RECORDS)
    with pytest.raises(jc.LeaseLost, match="closed"):
        retry.drive(steps, Script((retry.CancelLease, None)))


def test_a_create_whose_reply_was_lost_resumes_the_run_it_made() -> None:
    req = pb.OpenRequest(run_id="r", mode=pb.OPEN_MODE_CREATE)
    lease = pb.Lease(run_id="r", created=False)
    handle = type("Handle", (), {"lease": lease})()
    script = Script(
        (retry.OpenCall, jc.DaemonUnavailable("down")),
        (retry.Probe, True),
        (retry.Sleep, None),
        (retry.OpenCall, jc.SessionExists("exists")),
        (retry.CreatedBy, True),
        (retry.OpenCall, handle),
    )
    got, created = retry.drive(retry.open_run(req, 30.0), script)
    assert got is handle
    assert created  # it was this call's create that made the run
    last_open = script.seen[-1]
    assert isinstance(last_open, retry.OpenCall)
    assert last_open.request.mode == pb.OPEN_MODE_RESUME


def held_by_this_process() -> jc.Locked:
    return jc.Locked(
        "held", metadata={"holder_pid": str(os.getpid()), "holder_host": socket.gethostname()}
    )


def test_an_open_lost_in_transit_waits_out_its_own_lease_before_it_is_granted() -> None:
    """Found under load in CI: the daemon granted the first attempt, its answer was lost, and
    the retry was refused `locked` naming this very process until the daemon saw the first
    stream end."""
    req = pb.OpenRequest(run_id="r")
    handle = type("Handle", (), {"lease": pb.Lease(run_id="r", created=True)})()
    script = Script(
        (retry.OpenCall, jc.DaemonUnavailable("transport")),
        (retry.Probe, True),
        (retry.Sleep, None),
        (retry.OpenCall, held_by_this_process()),
        (retry.Sleep, None),
        (retry.OpenCall, held_by_this_process()),
        (retry.Sleep, None),
        (retry.OpenCall, handle),
    )
    got, _ = retry.drive(retry.open_run(req, 30.0), script)
    assert got is handle
    assert script.answers == []


def test_a_first_open_refused_as_held_by_this_process_is_raised_at_once() -> None:
    """Another client of this process holds the run: no attempt of ours was lost."""
    script = Script((retry.OpenCall, held_by_this_process()))
    with pytest.raises(jc.Locked):
        retry.drive(retry.open_run(pb.OpenRequest(run_id="r"), 30.0), script)


def test_a_fresh_create_of_an_existing_run_is_refused_without_looking_further() -> None:
    req = pb.OpenRequest(run_id="r", mode=pb.OPEN_MODE_CREATE)
    script = Script((retry.OpenCall, jc.SessionExists("exists")))
    with pytest.raises(jc.SessionExists):
        retry.drive(retry.open_run(req, 30.0), script)
