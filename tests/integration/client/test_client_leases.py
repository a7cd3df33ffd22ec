"""The Python client against a real daemon: a killed agent's lease, pending-turn recovery,
and the holder named by ``locked``."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.clientbin.procs import Procs
from tests.waiting import eventually


def test_a_killed_agent_releases_its_lease_and_its_one_open_call_is_completed_on_resume(
    daemon: Daemon, tmp_path: Path
) -> None:
    with Procs() as procs, jc.connect(str(daemon.socket), name="observer") as client:
        agent = procs.module(
            "tests.integration.clientbin.crash_writer",
            "--socket",
            str(daemon.socket),
            "--run-id",
            "crashy",
            out=tmp_path / "agent.out",
        )
        assert agent.wait_for_line("READY") == "READY 4"
        with pytest.raises(jc.Locked) as held:
            client.resume("crashy", FP)
        assert held.value.holder_name == "crash-writer"
        assert held.value.holder_pid == agent.pid

        agent.kill9()
        # the daemon ends the dead agent's lease when its stream breaks
        run = eventually(
            lambda: client.resume("crashy", FP, name="recoverer"),
            what="the killed agent's lease to end",
            retry_on=(jc.Locked,),
        )

        with run:
            pending = run.state.pending
            assert pending is not None
            assert [c.id for c in pending.unanswered] == ["toolu_3"]
            assert pending.answered_ids == ["toolu_1", "toolu_2"]
            assert "open_tool_calls" in [w.code for w in run.state.warnings]

            ran: list[str] = []

            def tool(call: jc.ToolCall) -> str:
                ran.append(call.id)
                return f"read {call.input['path']}"

            acks = run.complete_pending(tool)
            assert ran == ["toolu_3"]
            assert [a.seq for a in acks] == [5]
            assert run.complete_pending(tool) == []
            run.assistant("All three files read.", stop_reason="end_turn")
            run.terminal("completed")

        state = client.fold("crashy")
        assert state.pending is None
        assert state.completed
        assert state.counters.tool_calls == 3
        assert state.anomalies == []
        results = state.messages[2]["content"]
        assert [b["tool_use_id"] for b in results] == ["toolu_1", "toolu_2", "toolu_3"]
        assert results[2]["content"] == [{"type": "text", "text": "read f3.txt"}]
        assert client.verify("crashy").last_seq == 7


def test_locked_names_the_holders_name_pid_and_host(daemon: Daemon) -> None:
    with (
        jc.connect(str(daemon.socket)) as holder_client,
        jc.connect(str(daemon.socket)) as other,
        holder_client.start("held", FP, "hi", name="holder-bot"),
    ):
        with pytest.raises(jc.Locked) as info:
            other.resume("held", FP, name="intruder")
        err = info.value
        assert err.code == "locked"
        assert err.holder_name == "holder-bot"
        assert err.holder_pid == os.getpid()
        assert err.holder_host == socket.gethostname()
        assert err.holder_since.endswith("Z")
        assert "holder-bot" in err.message


def test_closing_a_writer_releases_the_lease_at_once(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("closer", FP, "hi") as run:
            run.user("more")
        with client.resume("closer", FP) as again:
            assert again.last_seq == 2
            assert again.state.messages[-1]["content"][-1]["text"] == "more"


def test_a_raising_tool_is_journaled_as_an_error_result(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("raising", FP, "go") as run:
        run.assistant(
            [
                {"type": "tool_use", "id": "a", "name": "read", "input": {}},
                {"type": "tool_use", "id": "b", "name": "read", "input": {}},
            ],
            stop_reason="tool_use",
        )

        def tool(call: jc.ToolCall) -> str:
            if call.id == "b":
                raise FileNotFoundError("no such file: b")
            return "fine"

        run.complete_pending(tool)
        results = run.fold().messages[-1]["content"]
        assert [r["is_error"] for r in results] == [False, True]
        assert results[1]["content"][0]["text"] == "FileNotFoundError: no such file: b"
