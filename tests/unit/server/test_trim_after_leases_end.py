"""The daemon gives the memory of many ended leases back to the system (docs/benchmarks.md
#memory): a mass lease end asks for an arena trim, a lone lease's end does not."""

from __future__ import annotations

import asyncio
from typing import Any

from journald.server.leases import Holder, LeaseTable
from journald.server.malloc_trim import LEASES_ENDED_PER_TRIM, Trimmer


class ClosingWriter:
    """The part of a ``RunWriter`` a release uses: its lock and its close."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()

    async def close(self) -> None:
        return None


def test_a_mass_lease_end_asks_for_a_trim_and_a_lone_one_does_not() -> None:
    trimmer = Trimmer()
    trimmer.lease_closed()
    assert trimmer.pending == 0, "one ended lease frees too little to walk every arena for"
    for _ in range(LEASES_ENDED_PER_TRIM - 1):
        trimmer.lease_closed()
    assert trimmer.pending == 2, "the leases' memory is trimmed at the next two ticks"
    assert trimmer.leases_ended == 0, "the next trim waits for as many ends again"


def test_a_lease_table_tells_the_trimmer_each_closed_journal() -> None:
    async def scenario() -> int:
        table = LeaseTable()
        closed: list[int] = []
        table.after_close = lambda: closed.append(1)
        for i in range(3):
            writer: Any = ClosingWriter()
            lease = table.grant(f"r{i}", Holder("t", 1, "h", "/", "now"), writer)
            table.release(lease)
            await table.wait_closed(f"r{i}")
        return len(closed)

    assert asyncio.run(scenario()) == 3
