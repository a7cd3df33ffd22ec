"""An ``AsyncLeaseSet`` open cancelled while the daemon is still granting it holds nothing: the
lease that arrives for no one is released over the stream. The daemon runs in process, its
store's create held on an event, so the cancel lands while the acquire is in the daemon."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import journald_client as jc
import pytest

from journald.core.records import Record
from journald.server import edge
from journald.server.service import JournalService
from journald.storage.memory import MemoryJournal, MemoryStore
from tests.waiting import wait_until_async

FP = jc.compute(provider="anthropic", model="m", system_prompt=["s"], tools=[])


class HeldCreate(MemoryStore):
    """The memory backend whose ``create`` waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.made: list[str] = []

    async def create(self, meta: Record) -> MemoryJournal:
        self.entered.set()
        await self.go.wait()
        journal = await super().create(meta)
        self.made.append(meta.payload["run_id"])
        return journal


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[JournalService, HeldCreate, str]]:
    store = HeldCreate()
    service = JournalService(store)
    server = grpc.aio.server()
    edge.add_service(server, service.parts(), 4 * 1024 * 1024)
    sock = tmp_path / "journald.sock"
    server.add_insecure_port(f"unix://{sock}")
    await server.start()
    try:
        yield service, store, str(sock)
    finally:
        await service.shutdown()
        await server.stop(None)


async def test_a_lease_granted_to_a_cancelled_open_is_released_at_once(
    served: tuple[JournalService, HeldCreate, str],
) -> None:
    service, store, sock = served
    async with jc.AsyncClient(sock) as client, client.lease_set() as leases:
        opening = asyncio.create_task(leases.start("cancelled", FP, "hi"))
        await asyncio.wait_for(store.entered.wait(), 10)  # the acquire is in the daemon
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        store.go.set()  # the daemon grants it now, to no one
        await wait_until_async(
            lambda: store.made == ["cancelled"] and service.runs.leases.held("cancelled") is None,
            what="the orphaned lease to be released",
        )
        # the set goes on: the run opens again over the same stream
        run = await leases.resume("cancelled", FP)
        assert run.last_seq == 1
        assert leases.runs == [run]
