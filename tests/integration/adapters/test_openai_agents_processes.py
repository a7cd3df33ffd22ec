"""kill -9 of an Agents SDK process in the middle of a tool call: the next process resumes
the session and sends the model a history it accepts (every function_call_output has its
call, every call has an output), and the conversation mirror stays model-ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import journald_client as jc
from journald_client.openai_agents import JournaldSession

from tests.daemon import Daemon
from tests.integration.clientbin.procs import Procs
from tests.waiting import wait_until

WORKER = "tests.integration.clientbin.agents_worker"


def _paired(items: list[dict[str, Any]]) -> bool:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    seen: set[str] = set()
    for i in items:
        if i.get("type") == "function_call":
            seen.add(i["call_id"])
        elif i.get("type") == "function_call_output" and i["call_id"] not in seen:
            return False
    return sorted(calls) == sorted(outputs)


def test_a_session_killed_mid_tool_resumes_with_a_history_the_model_accepts(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)

    def args(mode: str) -> list[str]:
        return ["--socket", sock, "--session", "chat-1", "--mode", mode, "--dir", str(tmp_path)]

    with Procs() as procs, jc.connect(sock) as client:
        first = procs.module(WORKER, *args("first"), out=tmp_path / "first.out")
        first.wait_for_line("TURN-1-DONE", 120)
        first.wait_for_line("TOOL-STARTED", 120)
        first.kill9()
        wait_until(
            lambda: all(r.status != "held" for r in client.list()),
            what="the killed writer's lease to end",
            timeout_s=60,
        )
        second = procs.module(WORKER, *args("resume"), out=tmp_path / "resume.out")
        sent = json.loads(second.wait_for_line("INPUT", 120).split(" ", 1)[1])
        assert second.wait_for_line("DONE", 60) == "DONE I am back"

        assert _paired(sent), sent
        texts = [i.get("content") for i in sent if i.get("role") == "user"]
        assert texts == ["find a", "find b", "are you still there?"]
        state = client.fold(JournaldSession("chat-1", client).run_id)
        governed = client.governed_messages(state.run_id)
    assert governed.synthesized_results == 0
    assert governed.dropped_messages == 0
    assert state.pending is None
    assert [m["role"] for m in state.messages][:3] == ["user", "assistant", "user"]
