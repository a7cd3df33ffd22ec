"""``JournaldSessionStore`` beyond the SDK's suite, against a real daemon: a long session's
inline tail rolls into attachment segments (the run's fold stays small) and reads back
exactly in a new store, uuids already stored are not stored twice, the lease is given back
when idle, a hung daemon costs the SDK's mirror no more than its own timeout, and refusals
(a key without a session id, a delete of a session another store mirrors) name what happened
and change nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest
from claude_agent_sdk.types import SessionKey
from journald_client import errors
from journald_client.claude_agent import (
    TAIL_BUDGET_BYTES,
    JournaldSessionStore,
    run_id_for,
)

from tests.daemon import Daemon
from tests.waiting import wait_until

pytestmark = pytest.mark.shared_daemon("file")
KEY: SessionKey = {"project_key": "-srv-app", "session_id": "0b7e-long"}


def turn(n: int, size: int = 4000) -> list[Any]:
    return [
        {"type": "user", "uuid": f"u{n}", "message": {"content": f"step {n} " + "x" * size}},
        {"type": "assistant", "uuid": f"a{n}", "z": n / 7, "message": {"content": "ok ☃ \ud83d"}},
        {"type": "last-prompt", "lastPrompt": f"step {n}"},
    ]


def text(entries: list[Any] | None) -> list[str]:
    return [json.dumps(e, ensure_ascii=False) for e in entries or []]


def test_a_long_session_reads_back_exactly_and_its_fold_stays_small(daemon: Daemon) -> None:
    huge = [{"type": "user", "uuid": "huge", "message": {"content": "y" * (9 << 20)}}]
    batches = [turn(n) for n in range(150)] + [huge] + [turn(n) for n in range(150, 160)]

    async def go() -> tuple[list[Any] | None, list[Any] | None]:
        with jc.connect(str(daemon.socket), name="long") as client:
            async with JournaldSessionStore(client, prefix="long") as writer:
                for b in batches:
                    await writer.append(KEY, b)
            state = client.fold(run_id_for("long", KEY["project_key"], KEY["session_id"])).state
            inline = sum(len(e.data) for e in state)
            assert inline < TAIL_BUDGET_BYTES + 4096, inline  # the tail and the summary
            assert any(e.sha256 for e in state)  # segments, one of two parts
            async with JournaldSessionStore(client, prefix="long") as again:
                first = await again.load(KEY)
                # a retried batch overlapping what landed: only the new entry is stored
                await again.append(KEY, [*turn(159), {"type": "user", "uuid": "new"}])
                second = await again.load(KEY)
        return first, second

    first, second = asyncio.run(go())
    expected = [e for b in batches for e in b]
    assert text(first) == text(expected)
    assert text(second) == text([*expected, {"type": "last-prompt", "lastPrompt": "step 159"},
                                 {"type": "user", "uuid": "new"}])  # fmt: skip


def test_an_idle_session_gives_its_lease_back(daemon: Daemon) -> None:
    key: SessionKey = {"project_key": "p", "session_id": "idle"}

    async def go() -> list[Any] | None:
        with jc.connect(str(daemon.socket)) as client:
            run = run_id_for("idle", "p", "idle")
            async with JournaldSessionStore(client, prefix="idle", idle_release_s=0.2) as first:
                await first.append(key, turn(0, 10))

                def free() -> bool:
                    return all(r.status != "held" for r in client.list() if r.run_id == run)

                wait_until(free, what="the idle lease to be given back")
                async with JournaldSessionStore(client, prefix="idle") as second:
                    await second.append(key, turn(1, 10))
                    return await second.load(key)

    assert text(asyncio.run(go())) == text(turn(0, 10) + turn(1, 10))


def test_refusals_name_the_session_and_change_nothing(daemon: Daemon) -> None:
    key: SessionKey = {"project_key": "p", "session_id": "kept"}

    async def go() -> None:
        with jc.connect(str(daemon.socket)) as client:
            async with JournaldSessionStore(client, prefix="refuse") as holder:
                with pytest.raises(errors.InvalidRequest, match="session_id"):
                    await holder.append({"project_key": "p", "session_id": ""}, turn(0))
                assert await holder.list_sessions("p") == []
                await holder.append(key, turn(0, 10))
                await holder.append({**key, "subpath": "subagents/agent-1"}, turn(0, 10))
                async with JournaldSessionStore(client, prefix="refuse") as other:
                    with pytest.raises(errors.Locked, match="'kept' of project 'p' is being"):
                        await other.delete(key)
                    with pytest.raises(errors.Locked):
                        await other.delete({**key, "subpath": "subagents/agent-1"})
                    with pytest.raises(errors.Locked, match="It is this process"):
                        await other.append(key, turn(1, 10))
                    assert text(await other.load(key)) == text(turn(0, 10))
                await holder.delete(key)
                assert await holder.load(key) is None

    asyncio.run(go())


def test_a_hung_daemon_costs_the_sdk_mirror_its_timeout_and_the_late_append_lands_in_order(
    tmp_path: Path,
) -> None:
    from claude_agent_sdk._internal.transcript_mirror_batcher import TranscriptMirrorBatcher

    key: SessionKey = {"project_key": "p", "session_id": "hung"}
    path = str(tmp_path / "projects" / "p" / "hung.jsonl")
    reported: list[str] = []

    async def report(_key: Any, error: str) -> None:
        reported.append(error)

    with Daemon(tmp_path, "file") as own, jc.connect(str(own.socket)) as client:

        async def go() -> list[Any] | None:
            async with JournaldSessionStore(client, prefix="hung") as store:
                batcher = TranscriptMirrorBatcher(
                    store=store,
                    projects_dir=str(tmp_path / "projects"),
                    on_error=report,
                    send_timeout=0.5,
                )
                batcher.enqueue(path, turn(0, 10))
                await batcher.flush()
                os.kill(own.pid, signal.SIGSTOP)
                woken = threading.Event()

                def wake() -> None:  # should the flush wait for the daemon, end the wait
                    woken.set()
                    os.kill(own.pid, signal.SIGCONT)

                watchdog = threading.Timer(20, wake)
                watchdog.start()
                try:
                    batcher.enqueue(path, turn(1, 10))
                    await batcher.flush()  # returns at the SDK's timeout, the daemon still hung
                    assert not woken.is_set(), "the flush waited for the daemon"
                    assert len(reported) == 1
                finally:
                    watchdog.cancel()
                    os.kill(own.pid, signal.SIGCONT)
                batcher.enqueue(path, turn(2, 10))
                await batcher.flush()
                return await store.load(key)

        loaded = asyncio.run(go())
    assert len(reported) == 1, reported
    assert text(loaded) == text(turn(0, 10) + turn(1, 10) + turn(2, 10))
