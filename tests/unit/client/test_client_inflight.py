"""The pipelined writer's bookkeeping (journald_client.inflight): seqs in submission order, a
bounded window, answers matched in order, and a failure that voids the tail and resyncs."""

from __future__ import annotations

import journald_client as jc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from journald_client import inflight
from journald_client.codec import Entry
from journald_client.pb import journal_pb2 as pb


def answer_for(item: inflight.Submitted) -> pb.AppendResponse:
    return pb.AppendResponse(
        acks=[
            pb.Ack(seq=r.seq, hash=f"h{r.seq}", durability=pb.DURABILITY_FSYNC_LOCAL)
            for r in item.records
        ]
    )


def test_a_window_below_one_is_refused_with_a_reason() -> None:
    with pytest.raises(jc.InvalidRequest, match="at least 1"):
        inflight.InFlight("r", 0, 1, 1)


def test_the_window_bounds_the_appends_in_flight_and_answers_free_it() -> None:
    book = inflight.InFlight("r", 3, 1, 1)
    items = [book.submit([Entry.user(str(i))], single=True) for i in range(3)]
    assert book.full()
    assert [i.records[0].seq for i in items] == [2, 3, 4]
    assert book.acked(answer_for(items[0])) is items[0]
    assert not book.full()
    assert inflight.answer(items[0]) == jc.Ack(2, "h2", "fsync_local", False)


def test_assistant_entries_are_numbered_in_submission_order() -> None:
    book = inflight.InFlight("r", 8, 1, 4)
    first = book.submit([Entry.assistant("a", stop_reason="end_turn")], single=True)
    both = book.submit(
        [Entry.assistant("b", stop_reason="end_turn"), Entry.assistant("c", stop_reason="x")],
        single=False,
    )
    its = [r.assistant.iteration for r in first.records + both.records]
    assert its == [4, 5, 6]


def test_an_answer_that_does_not_match_the_oldest_append_is_a_daemon_bug() -> None:
    book = inflight.InFlight("r", 4, 1, 1)
    book.submit([Entry.user("x")], single=True)
    wrong = pb.AppendResponse(acks=[pb.Ack(seq=7)])
    with pytest.raises(jc.JournaldError, match="daemon bug"):
        book.acked(wrong)


@given(
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=12),
    acked=st.integers(0, 12),
    broken=st.booleans(),
)
def test_a_failure_voids_every_append_in_flight_and_resumes_after_the_last_ack(
    sizes: list[int], acked: int, broken: bool
) -> None:
    book = inflight.InFlight("r", 64, 1, 1)
    items = [
        book.submit([Entry.user(f"{i}.{k}") for k in range(n)], single=False)
        for i, n in enumerate(sizes)
    ]
    acked = min(acked, len(items))
    for item in items[:acked]:
        book.acked(answer_for(item))
    last = items[acked - 1].records[-1].seq if acked else 1
    err = jc.InvalidRecord("refused")
    void = book.failed(err, 1, broken=broken)
    assert void == items[acked:]
    assert all(i.error is err for i in void)
    assert book.acked_seq == last
    assert book.next_seq == last + 1
    if void or broken:
        with pytest.raises(jc.InvalidRecord):
            book.check()  # told on the next call
    if not broken:
        book.check()  # ... once: then the writer goes on
        assert book.submit([Entry.user("again")], single=True).records[0].seq == last + 1
    else:
        with pytest.raises(jc.InvalidRecord):
            book.submit([Entry.user("again")], single=True)
    # closing flushes, but does not repeat why a writer cannot go on once it has said so
    assert book.flush_on_close() is not broken


def test_appends_found_stored_after_a_lost_answer_take_their_acks_in_order() -> None:
    book = inflight.InFlight("r", 8, 1, 1)
    one = book.submit([Entry.user("a")], single=True)
    two = book.submit([Entry.user("b"), Entry.user("c")], single=False)
    acks = [jc.Ack(s, f"h{s}", "unspecified", True) for s in (2, 3, 4)]
    assert book.adopted(acks) == [one, two]
    assert inflight.answer(one) == acks[0]
    assert inflight.answer(two) == acks[1:]
    assert book.acked_seq == 4
    assert not book.items
