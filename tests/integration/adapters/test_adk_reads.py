"""What ``JournaldSessionService`` reads to answer: the newest events of a long session come
from History pages near its end (never the whole conversation), and a listing reads no
session's events. Every call the service makes to the daemon is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from google.adk.sessions.base_session_service import GetSessionConfig
from journald_client.adk import JournaldSessionService
from journald_client.client import Client

from tests.daemon import Daemon
from tests.integration.adapters.adk_sides import calls, reply, responses, user_text

pytestmark = pytest.mark.shared_daemon("file")
EVENTS = 200


def recorded(client: Client) -> list[tuple[str, dict[str, Any]]]:
    """The reads ``client`` is asked for from now on: (method, arguments)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def spy(name: str, fn: Callable[..., Any], *params: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, {**dict(zip(params, args[1:], strict=False)), **kwargs}))
            return fn(*args, **kwargs)

        return call

    unary = client._unary

    def rpc(method: str, request: Any) -> Any:
        if method == "Fold":  # every Fold, whichever client method sends it
            seen.append(("fold", {"messages": not request.omit_messages}))
        return unary(method, request)

    client._unary = rpc  # type: ignore[method-assign]
    client.history = spy("history", client.history, "offset", "limit")  # type: ignore[method-assign]
    client.load = spy("load", client.load)  # type: ignore[method-assign]
    return seen


def test_recent_events_of_a_long_session_are_read_from_pages_near_its_end(
    daemon: Daemon,
) -> None:
    async def go() -> None:
        writer = JournaldSessionService(socket=str(daemon.socket))
        session = await writer.create_session(app_name="reads", user_id="ann", session_id="long")
        stamps = []
        for turn in range(EVENTS // 4):
            for event in (
                user_text(f"q{turn}"),
                calls(f"c{turn}"),
                responses(f"c{turn}"),
                reply(f"a{turn}"),
            ):
                stamps.append(event.timestamp)
                await writer.append_event(session, event)
        writer.close()

        reader = JournaldSessionService(socket=str(daemon.socket))
        whole = await reader.get_session(app_name="reads", user_id="ann", session_id="long")
        assert whole is not None
        assert len(whole.events) == EVENTS
        seen = recorded(reader.client)
        for config, expected in (
            (GetSessionConfig(num_recent_events=5), whole.events[-5:]),
            (GetSessionConfig(after_timestamp=stamps[-7]), whole.events[-7:]),
            (GetSessionConfig(num_recent_events=3, after_timestamp=stamps[-9]), whole.events[-3:]),
        ):
            seen.clear()
            got = await reader.get_session(
                app_name="reads", user_id="ann", session_id="long", config=config
            )
            assert got is not None
            assert [e.id for e in got.events] == [e.id for e in expected]
            assert got.state == whole.state
            assert not [c for c in seen if c[0] == "load"]
            assert all(args.get("messages") is False for name, args in seen if name == "fold")
            pages = [args for name, args in seen if name == "history"]
            assert pages, "the events come from History pages"
            # a few pages at the end: far fewer messages than the session holds
            assert sum(p["limit"] for p in pages) <= 40
            assert min(p["offset"] for p in pages if p["limit"]) >= 100
        reader.close()

    asyncio.run(go())


def test_a_listing_reads_no_session_events(daemon: Daemon) -> None:
    async def go() -> None:
        service = JournaldSessionService(socket=str(daemon.socket))
        for n in range(6):
            s = await service.create_session(app_name="listing", user_id=f"u{n % 2}")
            await service.append_event(s, user_text(f"hello {n}", {"n": n}))
        seen = recorded(service.client)
        listed = (await service.list_sessions(app_name="listing")).sessions
        assert sorted(s.state["n"] for s in listed) == list(range(6))
        assert all(s.events == [] for s in listed)
        assert {name for name, _ in seen} == {"fold"}
        assert all(args.get("messages") is False for _, args in seen)
        service.close()

    asyncio.run(go())
