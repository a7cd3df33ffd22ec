"""The command line takes a framework's own id (issue 26, item 8): a LangGraph thread id that
is not a safe run id, or an Agents session id, finds its run through the run's label."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from journald_client.langgraph import JournaldSaver
from journald_client.openai_agents import JournaldSession
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.daemon import Daemon


def cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "journald.cli", "--socket", str(daemon.socket), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_replay_and_show_accept_a_thread_id_and_a_session_id(daemon: Daemon) -> None:
    thread = "user 42 / chat #7"  # not a safe run id: its run is lg-<digest>
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [HumanMessage("hello from the graph", id="h1")]}
    with JournaldSaver(socket=str(daemon.socket)) as saver:
        saver.put(cfg, cp, {}, {"messages": 1})
    session = JournaldSession("support-7", socket=str(daemon.socket))
    asyncio.run(session.add_items([{"role": "user", "content": "hello from the agent"}]))
    session.close()

    replay = cli(daemon, "replay", thread, "--mode", "dump")
    assert replay.returncode == 0, replay.stderr
    assert "hello from the graph" in replay.stdout
    shown = cli(daemon, "show", "support-7")
    assert shown.returncode == 0, shown.stderr
    assert session.run_id in shown.stdout
    missing = cli(daemon, "show", "no-such-thread")
    assert missing.returncode != 0
    assert "no-such-thread" in missing.stderr
