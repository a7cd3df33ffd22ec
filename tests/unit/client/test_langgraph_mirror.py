"""The ``messages`` channel of a LangGraph thread mirrored into conversation records: what
each put appends is admissible under the journal's rules and folds to the graph's list."""

from __future__ import annotations

from typing import Any

import pytest
from journald_client.codec import stamp
from journald_client.langgraph._mirror import ABANDONED, Mirror
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from journald.core.admission import admit
from journald.core.fold import RunState, fold
from journald.core.records import Record
from journald.server import convert
from tests.builders import JournalBuilder
from tests.unit.invariants import model_ready_problems


class Thread:
    """A run fed by a mirror, checked by the daemon's own admission and fold."""

    def __init__(self) -> None:
        self.records: list[Record] = JournalBuilder("lg", prompt="").records[:1]
        self.mirror = Mirror()

    @property
    def state(self) -> RunState:
        return fold(self.records)

    def put(self, msgs: list[BaseMessage], ns: str = "") -> list[str]:
        checkpoint: dict[str, Any] = {"channel_values": {"messages": msgs}}
        entries = self.mirror.entries(ns, checkpoint, "messages", None)
        state = self.state
        recs = stamp(entries, state.last_seq + 1, state.next_iteration)
        prev = self.records[-1].hash
        built = []
        for r in recs:
            rec = convert.record_from_pb(r, prev=prev)
            built.append(rec)
            prev = rec.hash
        admit(state, built)
        self.records += built
        self.mirror.committed()
        return [r.kind for r in built]


def ai_call(cid: str, mid: str) -> AIMessage:
    return AIMessage(
        content="checking", tool_calls=[{"id": cid, "name": "look", "args": {}}], id=mid
    )


def test_new_messages_become_user_assistant_and_tool_result_records() -> None:
    t = Thread()
    msgs: list[BaseMessage] = [SystemMessage("be brief", id="s"), HumanMessage("hi", id="h1")]
    assert t.put(msgs) == ["user", "state"]
    msgs.append(ai_call("c1", "a1"))
    assert t.put(msgs) == ["assistant", "state"]
    assert t.state.pending is not None
    msgs += [ToolMessage("42", tool_call_id="c1", id="t1"), AIMessage("it is 42", id="a2")]
    assert t.put(msgs) == ["tool_result", "assistant", "state"]
    st = t.state
    assert model_ready_problems(st.messages) == []
    assert [m["role"] for m in st.messages] == ["user", "assistant", "user", "assistant"]
    assert st.messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "c1",
        "name": "look",
        "input": "{}",
    }
    assert st.counters.llm_calls == 2
    assert t.put(msgs) == []  # nothing new: nothing appended


def test_a_call_the_graph_never_answered_is_closed_before_the_conversation_moves_on() -> None:
    t = Thread()
    msgs: list[BaseMessage] = [HumanMessage("hi", id="h1"), ai_call("c1", "a1")]
    t.put(msgs)
    msgs.append(HumanMessage("never mind", id="h2"))
    assert t.put(msgs) == ["tool_result", "user", "state"]
    st = t.state
    assert st.pending is None
    result = st.messages[2]["content"][0]
    assert result["is_error"] is True
    assert result["content"][0]["text"] == ABANDONED
    assert model_ready_problems(st.messages) == []


def test_an_edited_list_replaces_the_conversation_with_an_edit_rebase() -> None:
    t = Thread()
    msgs: list[BaseMessage] = [HumanMessage("hi", id="h1"), ai_call("c1", "a1")]
    t.put(msgs)
    edited: list[BaseMessage] = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a9")]
    assert t.put(edited) == ["tool_result", "rebase", "state"]
    st = t.state
    assert st.messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]
    assert t.records[-2].payload["reason"] == "edit"
    assert t.put([*edited, HumanMessage("more", id="h3")]) == ["user", "state"]


def test_time_travel_to_a_tool_round_keeps_the_results_that_follow() -> None:
    t = Thread()
    done: list[BaseMessage] = [
        HumanMessage("hi", id="h1"),
        ai_call("c1", "a1"),
        ToolMessage("42", tool_call_id="c1", id="t1"),
        AIMessage("it is 42", id="a2"),
    ]
    t.put(done)
    back = done[:2]  # the checkpoint before the tool ran, then the tool runs again
    assert t.put(back) == ["rebase", "assistant", "state"]
    assert t.state.pending is not None
    again = [*back, ToolMessage("43", tool_call_id="c1", id="t2")]
    assert t.put(again) == ["tool_result", "state"]
    st = t.state
    assert st.pending is None
    assert st.messages[2]["content"][0]["tool_use_id"] == "c1"
    assert st.messages[2]["content"][0]["content"] == [{"type": "text", "text": "43"}]
    assert model_ready_problems(st.messages) == []
    assert st.anomalies == []


@pytest.mark.parametrize("ns", ["child:1"])
def test_subgraph_namespaces_and_lists_without_ids_are_not_mirrored(ns: str) -> None:
    t = Thread()
    assert t.put([HumanMessage("hi", id="h1")], ns=ns) == []
    assert t.put([HumanMessage("no id")]) == []
