"""The asyncio client against a real daemon: the same writer API, concurrent pending-call
completion, reads and live tail, and reconnect-and-reopen across a daemon restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP


async def test_an_async_writer_journals_a_turn_and_completes_its_calls_concurrently(
    daemon: Daemon,
) -> None:
    async with await jc.connect_async(str(daemon.socket), name="async-bot") as client:
        run = await client.start("aio", FP, "hello", labels={"k": "v"})
        async with run:
            assert run.created
            calls = [
                {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"i": i}}
                for i in range(3)
            ]
            ack = await run.assistant(calls, stop_reason="tool_use", usage={"input_tokens": 7})
            assert ack.seq == 2
            assert ack.durability == "fsync_local"
            await run.tool_result("t0", "zero")

            release = asyncio.Event()
            seen: list[str] = []

            async def tool(call: jc.ToolCall) -> str:
                if call.id == "t1":
                    await release.wait()  # t2 finishes first and is journaled first
                else:
                    release.set()
                if call.id == "t2":
                    raise RuntimeError("t2 failed")
                return f"done {call.input['i']}"

            acks = await run.complete_pending(tool, on_result=lambda c, a: seen.append(c.id))
            assert [a.seq for a in acks] == [4, 5]
            assert seen == ["t2", "t1"]
            await run.assistant("finished", stop_reason="end_turn")
            await run.terminal("completed")

        state = await client.fold("aio")
        assert state.completed
        assert state.counters.tool_calls == 3
        assert state.counters.input_tokens == 7
        assert state.labels == {"k": "v"}
        results = state.messages[2]["content"]
        assert [(b["tool_use_id"], b["is_error"]) for b in results] == [
            ("t0", False),
            ("t1", False),
            ("t2", True),
        ]
        records = [r async for r in client.load("aio")]
        assert [r.kind for r in records] == [
            "meta",
            "assistant",
            "tool_result",
            "tool_result",
            "tool_result",
            "assistant",
            "terminal",
        ]
        assert [r.payload["tool_use_id"] for r in records[3:5]] == ["t2", "t1"]

        tail = []
        async for rec in client.watch("aio", from_seq=5):
            tail.append(rec.seq)
            if rec.kind == "terminal":
                break
        assert tail == [5, 6, 7]
        assert [r.run_id for r in await client.list()] == ["aio"]
        assert (await client.verify("aio")).records == 7
        assert await client.delete("aio")
        with pytest.raises(jc.SessionNotFound):
            await client.fold("aio")


async def test_an_async_writer_reconnects_and_reopens_after_a_daemon_restart(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, "file")
    try:
        daemon.start()
        client = jc.AsyncClient(str(daemon.socket), name="aio-reconnect")
        async with client:
            run = await client.start("aio-r", FP, "hello")
            await run.user("before")
            daemon.kill9()
            daemon.start()
            ack = await run.user("after")
            assert ack.seq == 3
            assert run.reconnects == 1
            await run.terminal("completed")
            await run.close()
            state = await client.fold("aio-r")
            assert state.completed
            assert [b["text"] for b in state.messages[0]["content"]] == [
                "hello",
                "before",
                "after",
            ]
    finally:
        daemon.kill9()
