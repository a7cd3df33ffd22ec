"""The bundled ``claude`` CLI, run by the Claude Agent SDK's ``query()`` in real processes
against a scripted Messages API on loopback, mirroring its session to journald on JetStream:

* host A's agent runs a subagent (its transcript mirrored under a subpath), then asks for a
  ``Read`` tool call; the result is mirrored, and the agent is killed (``kill -9``, CLI and
  all) while its next model call is in flight;
* before that, host B's agent resuming the same session is refused by the lease A holds,
  and the SDK reports it as a ``MirrorErrorMessage`` naming A's process;
* after it, host C (another daemon on the same stream, an empty config dir) resumes the
  session from journald: every entry A's store acknowledged is there, in the main and the
  subagent transcripts, and the model is sent both tool calls with their results (no orphan
  call), then the new prompt."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest
from claude_agent_sdk import project_key_for_directory
from journald_client.claude_agent import JournaldSessionStore

from tests.daemon import Daemon
from tests.integration.adapters.scripted_messages_api import (
    FINAL_TEXT,
    FIRST_PROMPT,
    RESUMED_PROMPT,
    SUBAGENT_ID,
    SUBAGENT_TEXT,
    TOOL_USE_ID,
    ScriptedMessagesApi,
)
from tests.integration.clientbin.procs import ROOT
from tests.nats_server import NatsServer, create_stream
from tests.waiting import NotYet, eventually, wait_until

pytestmark = pytest.mark.slow
WORKER = "tests.integration.adapters.claude_worker"


class Agent:
    """One worker process in a session of its own, so ``kill9`` takes the CLI with it."""

    def __init__(self, out: Path, env: dict[str, str], *args: str) -> None:
        self.out = out
        with open(out, "wb") as fh:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", WORKER, *args],
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
            )

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").split("\n")[:-1]

    def wait_for(self, prefix: str, timeout_s: float = 90) -> str:
        def find() -> str:
            exited = self.popen.poll() is not None
            for line in self.lines():
                if line.startswith(prefix):
                    return line
            if exited:
                raise AssertionError(
                    f"agent exited {self.popen.returncode}:\n{self.out.read_text()}"
                )
            raise NotYet(f"no {prefix!r} yet:\n{self.out.read_text()[-3000:]}")

        return eventually(find, what=f"{prefix!r} from the agent", timeout_s=timeout_s)

    def acked(self, transcript: str = "main") -> list[str]:
        """The uuids of the entries the store acknowledged for one transcript."""
        return [
            u
            for line in self.lines()
            if line.startswith("ACKED ") and line.split()[1] == transcript
            for u in line.split()[2:]
        ]

    def kill9(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)  # its own process group: it and its CLI
        self.popen.wait()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.kill9()


def load(socket: Path, key: Any) -> list[Any]:
    async def read() -> Any:
        async with JournaldSessionStore(socket=str(socket)) as store:
            return await store.load(key)

    return asyncio.run(read()) or []


def subkeys(socket: Path, key: Any) -> list[str]:
    async def read() -> list[str]:
        async with JournaldSessionStore(socket=str(socket)) as store:
            return await store.list_subkeys(key)

    return asyncio.run(read())


def test_a_killed_agent_resumes_on_another_host_from_journald(
    tmp_path: Path, agents: list[Agent], start_nats: Callable[..., NatsServer]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the journal survived\n")
    with ExitStack() as stack:
        nats = start_nats()
        asyncio.run(create_stream(nats.url, "AGENTS", "agents"))
        hosts = {}
        for host in "ab":
            d = Daemon(tmp_path / host, "jetstream", "--nats-url", nats.url, "--stream", "AGENTS")
            (tmp_path / host).mkdir()
            hosts[host] = stack.enter_context(d)
        api = stack.enter_context(ScriptedMessagesApi(str(work / "notes.txt")))

        def agent(name: str, host: str, prompt: str, *resume: str) -> Agent:
            env = {
                "ANTHROPIC_BASE_URL": api.url,
                "ANTHROPIC_API_KEY": "sk-scripted",
                "HOME": str(tmp_path / f"home-{name}"),
                "CLAUDE_CONFIG_DIR": str(tmp_path / f"config-{name}"),  # each host its own
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
            }
            sock = str(hosts[host].socket)
            args = ["--socket", sock, "--cwd", str(work), "--prompt", prompt, *resume]
            started = Agent(tmp_path / f"{name}.out", env, *args)
            agents.append(started)
            return started

        first = agent("first", "a", FIRST_PROMPT)
        session = first.wait_for("SESSION ").split()[1]
        key = {"project_key": project_key_for_directory(str(work)), "session_id": session}
        # the subagent ran, the read's result reached the model (whose answer never comes)
        wait_until(
            lambda: len(api.main_requests()) >= 3,
            what="the model call after the tool",
            timeout_s=90,
        )

        def result_mirrored() -> bool:
            return any(_has_tool_result(e) for e in load(hosts["b"].socket, key))

        wait_until(
            result_mirrored, what="the tool result mirrored, read through host B", timeout_s=90
        )

        second = agent("second", "b", RESUMED_PROMPT, "--resume", session)
        refused = second.wait_for("MIRROR-ERROR ")
        assert f"pid {first.popen.pid}" in refused, refused
        assert "being mirrored by" in refused
        second.wait_for("DONE")
        acked = first.acked()
        stored_before = load(hosts["b"].socket, key)
        subpaths = subkeys(hosts["b"].socket, key)
        assert subpaths
        assert all(p.startswith("subagents/agent-") for p in subpaths)
        sub_acked = {p: first.acked(p) for p in subpaths}

        first.kill9()
        with jc.connect(str(hosts["b"].socket)) as client:
            wait_until(
                lambda: all(r.status != "held" for r in client.list()),
                what="the killed agent's lease to end",
                timeout_s=60,
            )
        third = agent("third", "b", RESUMED_PROMPT, "--resume", session)
        assert third.wait_for("RESULT ") == f"RESULT {FINAL_TEXT}"
        third.wait_for("DONE")
        assert not [line for line in third.lines() if line.startswith("MIRROR-ERROR")]

        stored = load(hosts["a"].socket, key)
        subagents = {p: load(hosts["a"].socket, {**key, "subpath": p}) for p in subpaths}
        assert subkeys(hosts["a"].socket, key) == subpaths
    for p, entries in subagents.items():  # every subagent transcript, whole, on host A
        assert set(sub_acked[p]) <= {e.get("uuid") for e in entries}, p
    assert any(SUBAGENT_TEXT in str(e.get("message")) for es in subagents.values() for e in es)
    uuids = [e.get("uuid") for e in stored]
    assert acked
    assert set(acked) <= set(uuids), "an acknowledged entry was lost"
    assert stored[: len(stored_before)] == stored_before
    added = {u for u in uuids if u} - {e.get("uuid") for e in stored_before}
    assert added <= set(third.acked())  # the refused agent stored nothing
    assert any(FINAL_TEXT in str(e.get("message")) for e in stored)  # the resume is mirrored
    resumed = [r for r in api.main_requests() if RESUMED_PROMPT in str(r["messages"])]
    sent = resumed[-1]["messages"]
    calls = [
        b["id"]
        for m in sent
        if m["role"] == "assistant"
        for b in _blocks(m)
        if b.get("type") == "tool_use"
    ]
    answered = [
        b["tool_use_id"]
        for m in sent
        if m["role"] == "user"
        for b in _blocks(m)
        if b.get("type") == "tool_result"
    ]
    assert calls == [SUBAGENT_ID, TOOL_USE_ID]
    assert answered == calls
    assert "the journal survived" in str(sent)
    assert FIRST_PROMPT in str(sent[0])


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [] if isinstance(content, str) else list(content or [])


def _has_tool_result(entry: Any) -> bool:
    message = entry.get("message") if isinstance(entry, dict) else None
    return isinstance(message, dict) and any(
        b.get("type") == "tool_result" and b.get("tool_use_id") == TOOL_USE_ID
        for b in _blocks(message)
    )
