"""The viewer's pure parts: transcript entries (pairing reused from replay), their layout at a
width, unknown record kinds, search, and the runs table's filter and sort."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from journald_client.state import JournalRecord, LeaseHolder, PendingResult, PendingTurn, RunInfo
from journald_client.state import ToolCall as ClientCall

from journald.cli import replay
from journald.view.data import RunRow
from journald.view.model import (
    Entry,
    build_entries,
    find,
    render_entry,
    unknown_record_entry,
)
from journald.view.runs import Filter, arrange
from tests.builders import text, tool_use


def call(tid: str, name: str = "read", args: str = '{"path":"a"}') -> dict[str, Any]:
    return tool_use(tid, name, args)


def result(tid: str, out: str, err: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": [text(out)], "is_error": err}


CONVERSATION = [
    {"role": "user", "content": [text("read two files")]},
    {"role": "assistant", "content": [text("reading"), call("t1"), call("t2", "stat")]},
    {"role": "user", "content": [result("t2", "no such file", True), result("t1", "hello")]},
    {"role": "assistant", "content": [text("done")]},
]


def pending_turn() -> PendingTurn:
    return PendingTurn(
        message={"role": "assistant", "content": [call("t8", "ls"), call("t9", "cat")]},
        iteration=3,
        stop_reason="tool_use",
        results=[PendingResult("t8", [text("a.txt")], False, 12)],
        answered_ids=["t8"],
        unanswered=[ClientCall("t9", "cat", "{}")],
        seq=11,
    )


def lines_of(entry: Entry, width: int = 60, expanded: bool = False) -> list[str]:
    return ["".join(t for t, _ in ln) for ln in render_entry(entry, width, expanded)]


def test_each_call_is_one_entry_with_its_result_paired_by_id_and_errors_are_marked() -> None:
    entries = build_entries(CONVERSATION, 0, None)
    calls = [e for e in entries if e.kind == "call"]
    assert [(c.tool_use_id, c.result, c.is_error) for c in calls] == [
        ("t1", "hello", False),
        ("t2", "no such file", True),
    ]
    assert not any(e.kind == "result" for e in entries)  # no result shown twice
    assert lines_of(calls[1])[1].strip().startswith("✗ error")
    assert [e.kind for e in entries] == ["user", "assistant", "call", "call", "assistant"]


def test_entries_pair_exactly_as_the_replay_transcript_does() -> None:
    lines = replay.transcript_of(CONVERSATION)
    pairs = [(a.tool_use_id, b.text) for a, b in itertools.pairwise(lines)]
    expected = [p for p, a in zip(pairs, lines, strict=False) if a.kind == "call"]
    got = [(e.tool_use_id, e.result) for e in build_entries(CONVERSATION, 0, None)]
    assert [g for g in got if g[0]] == expected


def test_the_open_turn_is_shown_apart_with_its_unanswered_calls_waiting() -> None:
    entries = build_entries(CONVERSATION, 0, pending_turn())
    head = next(i for i, e in enumerate(entries) if e.kind == "pending")
    assert "1 of 2 tool calls answered" in entries[head].text
    after = entries[head + 1 :]
    assert [(e.tool_use_id, e.result, e.waiting) for e in after] == [
        ("t8", "a.txt", False),
        ("t9", None, True),
    ]
    assert "waiting for its result" in lines_of(after[1])[-1]
    assert all(e.kind != "pending" for e in entries[:head])


def test_a_long_result_is_folded_to_a_few_lines_and_expands_in_full() -> None:
    out = "\n".join(f"line {i}" for i in range(40))
    entry = build_entries([{"role": "user", "content": [text("go")]}], 0, None)[0]
    big = Entry((1, 0), "call", "{}", "read", "t1", out)
    folded, full = lines_of(big), lines_of(big, expanded=True)
    assert len(folded) == 5  # the call, three lines, the count of the rest
    assert "37 more lines" in folded[-1]
    assert len(full) == 42  # the call, its arguments in full, forty lines
    assert "line 39" in full[-1]
    assert lines_of(entry) == ["user", "  go"]


@given(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300),
    st.integers(min_value=1, max_value=140),
    st.booleans(),
    st.sampled_from(["user", "assistant", "thinking", "call", "result", "note", "record"]),
)
def test_every_laid_out_line_fits_the_width(
    body: str, width: int, expanded: bool, kind: str
) -> None:
    clean = replay.clean(body)
    entry = Entry((0, 0), kind, clean, "tool", "t1", clean if kind == "call" else None)
    for ln in render_entry(entry, width, expanded):
        assert replay.cell_width("".join(t for t, _ in ln)) <= max(20, width)


def test_attachments_are_named_in_the_transcript() -> None:
    att = {"type": "attachment", "sha256": "ab" * 32, "media_type": "image/png", "name": "plot"}
    msgs = [
        {"role": "assistant", "content": [call("t1")]},
        {"role": "user", "content": [{**result("t1", ""), "content": [att]}]},
    ]
    entry = next(e for e in build_entries(msgs, 0, None) if e.kind == "call")
    assert entry.result == "[attachment plot image/png]"


def test_earlier_messages_not_loaded_are_counted_on_a_first_line() -> None:
    entries = build_entries(CONVERSATION[3:], 999_997, None, ended="completed")
    assert entries[0].kind == "gap"
    assert "999,997 earlier messages" in entries[0].text
    assert entries[1].key[0] == 999_997  # entries carry the conversation's own indexes
    assert entries[-1].kind == "end"
    assert "completed" in entries[-1].text


def _record(kind: str, seq: int, type_name: str) -> JournalRecord:
    canonical = json.dumps({"seq": seq, "type": type_name, "state": {"ns": "graph"}}).encode()
    return JournalRecord(seq, kind, "2026-11-30T12:00:00Z", "", "", canonical, None, {})


def test_an_unknown_record_kind_becomes_one_dim_line_naming_it() -> None:
    # a kind newer than this client: the oneof is unknown, so the decoded kind is empty
    entry = unknown_record_entry(_record("", 42, "journald.v1.record.state"), 7)
    assert entry is not None
    assert entry.kind == "record"
    assert lines_of(entry) == ["· journald.v1.record.state record at seq 42"]
    assert render_entry(entry, 60, False)[0][0][1] == "dim"
    rendered_kinds = ("assistant", "tool_result", "user", "terminal", "rebase", "meta")
    for kind in rendered_kinds:
        assert unknown_record_entry(_record(kind, 3, f"journald.v1.record.{kind}"), 1) is None


def test_search_finds_older_and_newer_entries_case_insensitively() -> None:
    entries = build_entries(CONVERSATION, 0, pending_turn())
    last = len(entries) - 1
    older = find(entries, "HELLO", last, -1)
    assert older is not None
    assert entries[older].tool_use_id == "t1"
    assert find(entries, "hello", older, -1) is None
    assert find(entries, "a.txt", older, 1) is not None
    assert find(entries, "", last, -1) is None


def _row(run_id: str, status: str, updated: str, labels: dict[str, str], **kw: Any) -> RunRow:
    holder = LeaseHolder("bot", 1, "h", "/", "t") if status == "held" else None
    prompt = kw.get("prompt", "")
    info = RunInfo(run_id, "c", updated, "m", prompt, status, 3, 10, 3, holder, labels)
    return RunRow(info, kw.get("pending"))


ROWS = [
    _row("alpha", "held", "2026-11-30T12:00:03Z", {"team": "blue"}, pending=2),
    _row("beta", "completed", "2026-11-30T12:00:05Z", {"team": "red"}, prompt="fix the bug"),
    _row("gamma", "open", "2026-11-30T12:00:01Z", {}, pending=0),
]


def test_filter_words_select_by_status_label_and_text() -> None:
    def ids(text: str) -> list[str]:
        return [r.info.run_id for r in arrange(ROWS, Filter.parse(text), "run", False)]

    assert ids("") == ["alpha", "beta", "gamma"]
    assert ids("status:held") == ["alpha"]
    assert ids("status:held status:open") == ["alpha", "gamma"]
    assert ids("label:team") == ["alpha", "beta"]
    assert ids("label:team=red") == ["beta"]
    assert ids("BUG") == ["beta"]
    assert ids("bot") == ["alpha"]  # the holder's name
    assert ids("label:team=red status:held") == []


def test_sort_orders_by_the_chosen_column_newest_or_largest_first() -> None:
    def ids(sort: str, reverse: bool = False) -> list[str]:
        return [r.info.run_id for r in arrange(ROWS, Filter(), sort, reverse)]

    assert ids("updated") == ["beta", "alpha", "gamma"]
    assert ids("updated", reverse=True) == ["gamma", "alpha", "beta"]
    assert ids("pending") == ["alpha", "beta", "gamma"]
    assert ids("run") == ["alpha", "beta", "gamma"]
