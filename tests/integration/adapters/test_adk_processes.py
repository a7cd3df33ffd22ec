"""kill -9 of a Google ADK agent process in the middle of a tool call: a new process resumes
the session from journald, nothing the service acknowledged is lost, and the model is handed
no function call without its response."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.clientbin.procs import Procs
from tests.waiting import wait_until

WORKER = "tests.integration.clientbin.adk_worker"


def _paired(contents: list[dict[str, Any]]) -> bool:
    """Every function call is answered by the next content, and every response answers a
    call of the content before it (ADK strips call ids before the model sees them, so a
    call and its response are matched by name and place)."""
    open_calls: list[str] = []
    for content in contents:
        parts = content.get("parts", [])
        answered = [p["function_response"]["name"] for p in parts if "function_response" in p]
        if sorted(answered) != sorted(open_calls):
            return False
        open_calls = [p["function_call"]["name"] for p in parts if "function_call" in p]
    return not open_calls


def _texts(contents: list[dict[str, Any]], role: str) -> list[str]:
    return [p["text"] for c in contents if c.get("role") == role for p in c["parts"] if "text" in p]


def test_an_agent_killed_mid_tool_resumes_in_a_new_process_with_every_call_answered(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)

    def args(mode: str) -> list[str]:
        return ["--socket", sock, "--session", "trip-1", "--mode", mode, "--dir", str(tmp_path)]

    with Procs() as procs, jc.connect(sock) as client:
        first = procs.module(WORKER, *args("first"), out=tmp_path / "first.out")
        first.wait_for_line("TURN-1-DONE", 120)
        first.wait_for_line("TOOL-STARTED", 120)
        first.kill9()
        wait_until(
            lambda: all(r.status != "held" for r in client.list()),
            what="the killed agent's lease to end",
            timeout_s=60,
        )
        second = procs.module(WORKER, *args("resume"), out=tmp_path / "resume.out")
        handed = json.loads(second.wait_for_line("INPUT", 120).split(" ", 1)[1])
        assert second.wait_for_line("DONE", 60) == "DONE I am back"

    assert _paired(handed), handed
    # everything acknowledged before the kill is there, in order: both questions, the
    # first tool round and its answer, and the call that was running when the process died
    assert _texts(handed, "user") == ["find a", "find b", "are you still there?"]
    assert _texts(handed, "model") == ["lookup is done"]
    calls = [p["function_call"]["name"] for c in handed for p in c["parts"] if "function_call" in p]
    assert calls == ["lookup", "slow"]
    answers = [
        p["function_response"]["response"]
        for c in handed
        for p in c["parts"]
        if "function_response" in p
    ]
    assert answers[0] == {"result": "found a"}
    assert "never returned" in answers[1]["error"]
