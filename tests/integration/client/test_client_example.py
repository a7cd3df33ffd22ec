"""The example agent (clients/python/examples/agent.py) against a real daemon: killed with
--crash-after in the middle of a tool batch, then resumed to completion."""

from __future__ import annotations

import hashlib
from pathlib import Path

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.clientbin.procs import ROOT, Procs

AGENT = ROOT / "clients" / "python" / "examples" / "agent.py"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha beta gamma\nsecond line\n")
    (ws / "b.txt").write_text("one two\n")
    (ws / "c.md").write_text("# title here\n")
    return ws


def test_the_example_agent_is_killed_twice_mid_batch_and_resumes_to_completion(
    daemon: Daemon, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    env = {"JOURNALD_SOCKET": str(daemon.socket)}
    args = ("--run-id", "survey", "--dir", str(ws))
    with Procs() as procs:
        crashed = procs.script(AGENT, *args, "--crash-after", "4", out=tmp_path / "1.out", env=env)
        assert crashed.wait(60) == -9, crashed.text()
        assert "simulating a crash after 4 tool result(s)" in crashed.text()

        with jc.connect(str(daemon.socket)) as client:
            state = client.fold("survey")
            assert state.pending is not None
            assert len(state.pending.answered_ids) == 3
            assert len(state.pending.unanswered) == 6
            assert not state.terminal_is_last

        # killed again in the middle of completing the pending turn
        again = procs.script(
            AGENT, *args, "--resume", "--crash-after", "2", out=tmp_path / "2.out", env=env
        )
        assert again.wait(60) == -9, again.text()
        assert "pending turn at seq 4: 3 result(s) journaled, 6 call(s) to run" in again.text()

        resumed = procs.script(AGENT, *args, "--resume", out=tmp_path / "3.out", env=env)
        assert resumed.wait(60) == 0, resumed.text()
        out = resumed.text()
        assert "pending turn at seq 4: 5 result(s) journaled, 4 call(s) to run" in out
        # only the unanswered calls ran on resume
        assert "[toolu_02_04]" not in out
        assert "[toolu_02_05]" in out

    digest = hashlib.sha256((ws / "b.txt").read_bytes()).hexdigest()
    assert f"- b.txt sha256_file: {digest}" in out
    assert "- a.txt word_count: 5" in out
    with jc.connect(str(daemon.socket)) as client:
        state = client.fold("survey")
        assert state.completed
        assert state.pending is None
        assert state.anomalies == []
        assert state.counters.llm_calls == 3
        assert state.counters.tool_calls == 10
        assert state.labels == {"example": "agent"}
        assert client.verify("survey").last_seq == state.last_seq == 15
        # the resumed conversation is the one an uninterrupted run would have produced
        results = state.messages[4]["content"]
        assert [b["tool_use_id"] for b in results] == [f"toolu_02_{i:02d}" for i in range(9)]
        assert not any(b["is_error"] for b in results)


def test_the_example_agent_refuses_to_resume_a_completed_run(
    daemon: Daemon, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    env = {"JOURNALD_SOCKET": str(daemon.socket)}
    args = ("--run-id", "once", "--dir", str(ws))
    with Procs() as procs:
        first = procs.script(AGENT, *args, out=tmp_path / "1.out", env=env)
        assert first.wait(60) == 0, first.text()
        again = procs.script(AGENT, *args, "--resume", out=tmp_path / "2.out", env=env)
        assert again.wait(60) == 1
        assert "completed" in again.text()
