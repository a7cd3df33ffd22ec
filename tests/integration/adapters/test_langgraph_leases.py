"""The lease of a LangGraph thread as agent authors hold it (issue 26, items 3 and 8): a second
process is refused before any node or tool of it runs, while reads still answer; a saver per
request gives the lease back when its run ends."""

from __future__ import annotations

import json
from pathlib import Path

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.clientbin.procs import Procs

THREAD = "lease-thread"
WORKER = "tests.integration.clientbin.langgraph_lease_worker"


def test_a_second_process_is_refused_before_its_tool_runs_and_can_still_read(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)
    effects = tmp_path / "side.effects"

    def args(mode: str) -> list[str]:
        return ["--socket", sock, "--thread", THREAD, "--mode", mode, "--dir", str(tmp_path)]

    with Procs() as procs:
        first = procs.module(WORKER, *args("drive"), out=tmp_path / "drive.out")
        first.wait_for_line("TOOL-STARTED", 120)  # the tool runs; its result is not saved yet
        second = procs.module(WORKER, *args("intrude"), out=tmp_path / "intrude.out")
        refused = second.wait_for_line("LOCKED", 120).split(" ", 2)
        state = second.wait_for_line("STATE", 60)
        assert second.popen.wait(60) == 0
        assert effects.read_text().split() == [str(first.pid)]  # the second ran no tool
        assert refused[1] == str(first.pid)
        message = json.loads(refused[2])
        assert f"LangGraph thread {THREAD!r} is being run by pid {first.pid}" in message
        assert "did not start any node" in message
        assert json.loads(state.split(" ", 1)[1]) == ["tool"]  # get_state answered
        (tmp_path / "go").touch()
        done = json.loads(first.wait_for_line("DONE", 120).split(" ", 1)[1])
        assert first.popen.wait(60) == 0
    assert done == ["pay", "charging", "charged", "done"]
    assert effects.read_text().split() == [str(first.pid)]


def test_a_saver_per_request_gives_the_lease_back_when_its_run_ends(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)
    args = ["--socket", sock, "--thread", THREAD, "--mode", "request", "--dir", str(tmp_path)]
    with Procs() as procs:
        worker = procs.module(WORKER, *args, out=tmp_path / "request.out")
        worker.wait_for_line("DONE", 120)
        assert worker.popen.wait(60) == 0
    assert len(effects := (tmp_path / "side.effects").read_text().split()) == 2, effects
    with jc.connect(sock) as client:
        contents = [b.get("text") for m in client.fold(THREAD).messages for b in m["content"]]
    assert contents.count("done") == 2
