"""The Claude Agent SDK's own SessionStore conformance suite
(``claude_agent_sdk.testing.run_session_store_conformance``, 14 contracts) against a real daemon,
on the file backend and on JetStream, with every optional method present so no contract is
skipped. Each contract gets a fresh store: a new ``prefix``, as a fresh bucket prefix would."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import journald_client as jc
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionStore
from journald_client.claude_agent import JournaldSessionStore

from tests.daemon import Daemon
from tests.nats_server import NatsServer, create_stream

OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")


class Counting(JournaldSessionStore):
    """The journald store, counting which protocol methods the suite called."""

    calls: ClassVar[Counter[str]] = Counter()

    async def append(self, key: Any, entries: Any) -> None:
        self.calls["append"] += 1
        await super().append(key, entries)

    async def load(self, key: Any) -> Any:
        self.calls["load"] += 1
        return await super().load(key)

    async def list_sessions(self, project_key: str) -> Any:
        self.calls["list_sessions"] += 1
        return await super().list_sessions(project_key)

    async def list_session_summaries(self, project_key: str) -> Any:
        self.calls["list_session_summaries"] += 1
        return await super().list_session_summaries(project_key)

    async def delete(self, key: Any) -> None:
        self.calls["delete"] += 1
        await super().delete(key)

    async def list_subkeys(self, key: Any) -> Any:
        self.calls["list_subkeys"] += 1
        return await super().list_subkeys(key)


def run_conformance(socket: str) -> Counter[str]:
    for method in OPTIONAL:  # the suite skips an optional method the class does not override
        assert getattr(JournaldSessionStore, method) is not getattr(SessionStore, method)
    Counting.calls = Counter()
    stores: list[JournaldSessionStore] = []
    with jc.connect(socket, name="conformance") as client:
        prefixes = (f"conf{n}" for n in itertools.count())

        def make_store() -> JournaldSessionStore:
            store = Counting(client, prefix=next(prefixes))
            stores.append(store)
            return store

        try:
            asyncio.run(run_session_store_conformance(make_store))
        finally:
            for store in stores:
                store.close()
        runs = client.list()
    # every run the suite made is a store's, held by none once the stores are closed
    assert runs
    assert all(r.labels["claude_agent.store"].startswith("conf") for r in runs)
    assert all(r.status != "held" for r in runs)
    return Counting.calls


def test_session_store_conformance_passes_every_contract_on_the_file_backend(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as daemon:
        calls = run_conformance(str(daemon.socket))
    assert set(calls) == {"append", "load", *OPTIONAL}, calls


def test_session_store_conformance_passes_every_contract_on_jetstream(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    server = start_nats()
    asyncio.run(create_stream(server.url, "CLAUDE", "claude"))
    args = ("--nats-url", server.url, "--stream", "CLAUDE")
    with Daemon(tmp_path, "jetstream", *args) as daemon:
        calls = run_conformance(str(daemon.socket))
    assert set(calls) == {"append", "load", *OPTIONAL}, calls
