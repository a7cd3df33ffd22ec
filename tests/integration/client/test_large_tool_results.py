"""A tool result larger than ``--max-record-bytes`` (issue 31, item 6): refused with advice
that works, and journaled through ``tool_result(..., as_attachment=True)``: the content is
stored as an attachment and the record holds its block (docs/protocol.md#large-tool-results).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import journald_client as jc
import pytest
from journald_client import errors
from journald_client.aio import AsyncClient

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

BIG = "a log line\n" * (5 * 1024 * 1024 // 11)
CALL = {"type": "tool_use", "id": "read_1", "name": "read_file", "input": "{}"}


def test_an_oversized_tool_result_is_refused_with_advice_and_goes_in_as_an_attachment(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        with client.start("big", FP, "read the log") as run:
            run.assistant([CALL], stop_reason="tool_use")
            with pytest.raises(errors.InvalidRecord) as refused:
                run.tool_result("read_1", BIG)
            assert "as_attachment=True" in refused.value.message
            ack = run.tool_result("read_1", BIG, as_attachment=True)
            assert ack.seq == 3
            blocks = [{"type": "text", "text": "part"}, {"type": "text", "text": "two"}]
            run.assistant([{**CALL, "id": "read_2"}], stop_reason="tool_use")
            run.tool_result("read_2", blocks, as_attachment=True)
        results = [m for m in client.fold("big").messages if m["role"] == "user"][1:]
        first = results[0]["content"][0]["content"][0]
        assert first["type"] == "attachment"
        assert first["media_type"] == "text/plain; charset=utf-8"
        assert first["name"] == "read_1"
        assert client.get_attachment("big", first["sha256"]).decode() == BIG
        second = results[1]["content"][0]["content"][0]
        assert second["media_type"] == "application/json"
        assert json.loads(client.get_attachment("big", second["sha256"])) == blocks
        client.verify("big")


def test_the_async_client_journals_a_result_as_an_attachment_too(tmp_path: Path) -> None:
    async def main(sock: str) -> bytes:
        async with AsyncClient(sock) as client:
            async with await client.start("big-aio", FP, "read the log") as run:
                await run.assistant([CALL], stop_reason="tool_use")
                await run.tool_result("read_1", BIG, as_attachment=True)
            state = await client.fold("big-aio")
            block = state.messages[-1]["content"][0]["content"][0]
            return await client.get_attachment("big-aio", block["sha256"])

    with Daemon(tmp_path, "file") as d:
        assert asyncio.run(main(str(d.socket))).decode() == BIG
