"""Two journald daemons (standing for two hosts) share runs through one JetStream stream.

The example agent runs against daemon A and is killed (SIGKILL) in the middle of a tool
batch; it resumes against daemon B, which continues the same run from the stream; daemon A
then reads the completed run back and its chain verifies.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.clientbin.procs import ROOT, Procs
from tests.storage.backend_jetstream import fresh_stream

AGENT = ROOT / "clients" / "python" / "examples" / "agent.py"


def host_socket(host: str, stream: str) -> Path:
    """A short socket path (a unix socket path is at most 107 bytes) unique to this process:
    stream names count from 1 in every suite, and a second suite on the machine once bound
    the same path, so one suite's agent talked to the other's daemon."""
    return Path(f"/tmp/jd-js-{host}-{stream}-{os.getpid()}/s")


pytestmark = pytest.mark.slow


def test_a_run_started_on_one_daemon_resumes_on_another_through_the_stream(
    tmp_path: Path,
) -> None:
    url, name, _ = asyncio.run(fresh_stream(allow_atomic=True))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha beta gamma\nsecond line\n")
    (ws / "b.txt").write_text("one two\n")
    (ws / "c.md").write_text("# title here\n")
    flags = ("--nats-url", url, "--stream", name)
    host_a = Daemon(tmp_path / "a", "jetstream", *flags, socket=host_socket("a", name))
    host_b = Daemon(tmp_path / "b", "jetstream", *flags, socket=host_socket("b", name))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with host_a, host_b, Procs() as procs:
        args = ("--run-id", "shared", "--dir", str(ws))
        env_a = {"JOURNALD_SOCKET": str(host_a.socket)}
        env_b = {"JOURNALD_SOCKET": str(host_b.socket)}
        crashed = procs.script(
            AGENT, *args, "--crash-after", "4", out=tmp_path / "1.out", env=env_a
        )
        assert crashed.wait(60) == -9, crashed.text()
        resumed = procs.script(AGENT, *args, "--resume", out=tmp_path / "2.out", env=env_b)
        assert resumed.wait(60) == 0, resumed.text() + host_b.log()
        with jc.connect(str(host_a.socket)) as client:
            state = client.fold("shared")
            assert state.completed
            assert state.pending is None
            assert client.verify("shared").last_seq == state.last_seq
            assert [r.run_id for r in client.list()] == ["shared"]


def test_a_run_held_on_one_daemon_is_refused_at_open_on_another_until_released(
    tmp_path: Path,
) -> None:
    url, name, _ = asyncio.run(fresh_stream())
    flags = ("--nats-url", url, "--stream", name)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host_a = Daemon(tmp_path / "a", "jetstream", *flags, socket=host_socket("a", name))
    host_b = Daemon(tmp_path / "b", "jetstream", *flags, socket=host_socket("b", name))
    with (
        host_a,
        host_b,
        jc.connect(str(host_a.socket)) as client_a,
        jc.connect(str(host_b.socket)) as client_b,
    ):
        run_a = client_a.start("fenced", FP, "hello")
        run_a.assistant("first answer", stop_reason="end_turn")
        # host A's agent hangs with its lease held: host B may not take the run over
        with pytest.raises(jc.Locked):
            client_b.resume("fenced", FP)
        run_a.user("a follow-up from host A")
        run_a.close()
        run_b = client_b.resume("fenced", FP)
        run_b.assistant("answer from B", stop_reason="end_turn")
        run_b.terminal("completed")
        records = list(client_a.load("fenced"))
        assert [r.seq for r in records] == [1, 2, 3, 4, 5]
        assert client_a.verify("fenced").last_seq == 5
