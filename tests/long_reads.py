"""Runs of long tool reads through the Python client, shared by the tests of message pages:
each read is larger than a page (128 KiB), so every tool turn seals a page of its own."""

from __future__ import annotations

import journald_client as jc

from journald.core.checkpoints import governed
from tests.integration.clientbin.common import FP

READ_BYTES = 300 * 1024  # each tool turn is a page of its own


def read_turns(run: jc.Run, prefix: str, n: int, read_bytes: int = READ_BYTES) -> None:
    """``n`` tool turns reading ``read_bytes`` each (tool ids ``<prefix><i>``), then a final
    answer."""
    for i in range(n):
        tid = f"{prefix}{i}"
        call = {"type": "tool_use", "id": tid, "name": "read_file", "input": "{}"}
        run.assistant([call], stop_reason="tool_use")
        run.tool_result(tid, f"{prefix} {i} " + "r" * read_bytes)
    run.assistant(f"read {n} files", stop_reason="end_turn")


def default_view_reads_whole(client: jc.Client, run_id: str) -> None:
    """Every page of History's default (cleaned-up) view is that of the whole conversation."""
    want = governed(client.fold(run_id).messages)
    offset = 0
    while offset < len(want):
        page = client.history(run_id, offset, 2)
        assert page.total == len(want)
        assert page.messages == want[page.offset : page.next_offset]
        offset = page.next_offset


PAGE_RESULT_BYTES = 128 * 1024  # a result of a page's size: each tool turn closes a page


def start_with_page_reads(
    client: jc.Client, run_id: str, turns: int, result_bytes: int = PAGE_RESULT_BYTES
) -> None:
    """Start ``run_id`` and write ``turns`` tool turns of ``result_bytes`` each (tool ids
    ``read_<i>``), then a final answer; the lease ends with the block."""
    with client.start(run_id, FP, "read every file of the repository") as run:
        for i in range(turns):
            tid = f"read_{i}"
            call = {"type": "tool_use", "id": tid, "name": "read_file", "input": f'{{"i": {i}}}'}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(tid, f"file {i} " + "y" * result_bytes)
        run.assistant("I read them all.", stop_reason="end_turn")
