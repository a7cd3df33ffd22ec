"""Two processes driving one LangGraph thread: the second is refused ``locked`` naming the
first (the thread cannot silently fork); kill -9 of the first mid-step leaves the last
durable checkpoint with its pending writes, and the next process resumes from there."""

from __future__ import annotations

import json
from pathlib import Path

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.clientbin.procs import Procs
from tests.waiting import wait_until

THREAD = "lg-thread-1"
WORKER = "tests.integration.clientbin.langgraph_worker"


def _writes_saved(client: jc.Client) -> bool:
    try:
        state = client.fold(THREAD)
    except jc.SessionNotFound:
        return False
    return any(e.namespace == "langgraph.writes" for e in state.state)


def test_a_second_driver_is_refused_and_a_killed_driver_is_resumed_with_its_writes(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)

    def worker(mode: str) -> list[str]:
        return ["--socket", sock, "--thread", THREAD, "--mode", mode, "--dir", str(tmp_path)]

    with Procs() as procs, jc.connect(sock) as client:
        first = procs.module(WORKER, *worker("drive"), out=tmp_path / "drive.out")
        first.wait_for_line("SLOW-STARTED", 120)
        # fast finished in the same superstep: its write is durable before slow is done
        wait_until(lambda: _writes_saved(client), what="fast's pending write", timeout_s=60)

        second = procs.module(WORKER, *worker("intrude"), out=tmp_path / "intrude.out")
        refused = second.wait_for_line("LOCKED", 120).split()
        assert refused[1:] == [str(first.pid), "worker-drive"]
        assert second.popen.wait(60) == 0

        first.kill9()  # mid-step: slow never returned
        wait_until(lambda: client.list()[0].status != "held", what="the lease to end", timeout_s=60)
        (tmp_path / "go").touch()
        third = procs.module(WORKER, *worker("resume"), out=tmp_path / "resume.out")
        done = json.loads(third.wait_for_line("DONE", 120).split(" ", 1)[1])
        assert third.popen.wait(60) == 0

    assert (tmp_path / "fast.runs").read_text() == "ran\n"  # its pending write was reused
    assert done["fast"] == "F"
    assert done["slow"] == "S"
    assert done["messages"] == [
        ["HumanMessage", "what is it?"],
        ["AIMessage", "let me look"],
        ["ToolMessage", "42"],
        ["AIMessage", "the answer is 42"],
    ]
    with jc.connect(sock) as client:
        state = client.fold(THREAD)
        governed = client.governed_messages(THREAD)
    # the conversation mirror: what `journald replay` and governance see
    assert [m["role"] for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert state.messages[1]["content"][-1]["id"] == "call_1"
    assert state.messages[2]["content"][0]["tool_use_id"] == "call_1"
    assert state.messages[3]["content"] == [{"type": "text", "text": "the answer is 42"}]
    assert "me too" not in json.dumps(state.messages)  # the refused driver wrote nothing
    assert governed.synthesized_results == 0
    assert governed.dropped_messages == 0
