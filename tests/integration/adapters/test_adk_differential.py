"""Differential tests (issue 29): the same session operations through ADK's own
``DatabaseSessionService`` on SQLite and through ``JournaldSessionService`` on a real daemon,
compared after each step: state prefixes (``app:`` across an app's sessions, ``user:`` across
a user's, ``temp:`` never kept), event order, ``num_recent_events``, ``after_timestamp``,
list and delete, and a Hypothesis-driven sequence of all of them."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from journald_client.adk import JournaldSessionService

from tests.daemon import Daemon
from tests.integration.adapters.adk_sides import (
    Sides,
    calls,
    reply,
    responses,
    user_text,
)
from tests.profiles import MachineRun, run_machine

pytestmark = pytest.mark.shared_daemon("file")


def _both_same(pair: list[Any]) -> Any:
    assert pair[0] == pair[1]
    return pair[0]


def test_state_prefixes_are_shared_across_sessions_and_temp_keys_are_never_kept(
    daemon: Daemon, tmp_path: Path
) -> None:
    async def go() -> None:
        sides = Sides(daemon, tmp_path, tmp_path.name)
        try:
            first = _both_same(
                await sides.create(
                    "ann", "s1", {"cart": 1, "app:banner": "sale", "user:lang": "en", "temp:x": 9}
                )
            )
            assert first["state"] == {"cart": 1, "app:banner": "sale", "user:lang": "en"}
            await sides.create("ann", "s2")
            await sides.create("bob", "s3", {"user:lang": "fr"})
            await sides.append("ann", "s1", user_text("hi", {"temp:scratch": 1, "cart": 2}))
            await sides.append(
                "ann", "s2", reply("hello", {"app:banner": "new", "user:lang": "de", "seen": True})
            )
            for user, sid in (("ann", "s1"), ("ann", "s2"), ("bob", "s3")):
                got = _both_same(await sides.get(user, sid))
                assert not any(k.startswith("temp:") for k in got["state"])
                assert got["state"]["app:banner"] == "new"  # written through another session
            ann = _both_same(await sides.get("ann", "s1"))
            assert ann["state"]["user:lang"] == "de"
            assert ann["state"]["cart"] == 2
            assert "seen" not in ann["state"]  # a session key stays in its session
            bob = _both_same(await sides.get("bob", "s3"))
            assert bob["state"]["user:lang"] == "fr"
            # the event keeps its delta without the temp key, as stored
            assert ann["events"][0]["actions"]["state_delta"] == {"cart": 2}
            users = [
                await s.get_user_state(app_name=sides.app, user_id="ann") for s in sides.services
            ]
            assert users[0] == users[1] == {"lang": "de"}
        finally:
            await sides.close()

    asyncio.run(go())


def test_recent_events_and_after_timestamp_select_what_the_database_service_selects(
    daemon: Daemon, tmp_path: Path
) -> None:
    async def go() -> None:
        sides = Sides(daemon, tmp_path, tmp_path.name)
        try:
            await sides.create("ann", "long")
            stamps = []
            for turn in range(15):
                ids = [f"c{turn}a", f"c{turn}b"]
                for event in (
                    user_text(f"question {turn}"),
                    calls(*ids),
                    responses(*reversed(ids)),  # answered out of call order
                    reply(f"answer {turn}", {"turns": turn}),
                ):
                    stamps.append(event.timestamp)
                    await sides.append("ann", "long", event)
            whole = _both_same(await sides.get("ann", "long"))
            assert len(whole["events"]) == 60
            assert [e["timestamp"] for e in whole["events"]] == stamps
            for n in (0, 1, 2, 3, 5, 20, 59, 60, 100):
                got = _both_same(await sides.get("ann", "long", num_recent_events=n))
                assert got["events"] == (whole["events"][-n:] if n else [])
            for after in (stamps[0], stamps[10], stamps[30] + 0.0005, stamps[-1], stamps[-1] + 1):
                _both_same(await sides.get("ann", "long", after_timestamp=after))
                for n in (1, 4, 50):
                    _both_same(
                        await sides.get("ann", "long", after_timestamp=after, num_recent_events=n)
                    )
        finally:
            await sides.close()

    asyncio.run(go())


def test_list_delete_duplicates_and_stale_writers_behave_as_in_the_database_service(
    daemon: Daemon, tmp_path: Path
) -> None:
    async def go() -> None:
        sides = Sides(daemon, tmp_path, tmp_path.name)
        try:
            await sides.create("ann", "a1", {"k": 1})
            await sides.create("ann", "a2")
            await sides.create("bob", "b1", {"user:tier": "gold"})
            await sides.append("ann", "a1", user_text("later"))  # a1 becomes the newest
            listed = _both_same(await sides.listed())
            assert [s["id"] for s in listed] == ["a2", "b1", "a1"]
            assert _both_same(await sides.listed("bob"))[0]["state"] == {"user:tier": "gold"}
            # without state, from one listing of the runs: the same sessions, order and times
            bare = JournaldSessionService(client=sides.jd.client, list_state=False)
            theirs = (await sides.db.list_sessions(app_name=sides.app)).sessions
            ours = (await bare.list_sessions(app_name=sides.app)).sessions
            bare.close()
            assert [(s.id, s.user_id) for s in ours] == [(s.id, s.user_id) for s in theirs]
            assert round(ours[-1].last_update_time, 6) == round(theirs[-1].last_update_time, 6)
            assert all(s.state == {} for s in ours)
            for service in sides.services:
                with pytest.raises(AlreadyExistsError):
                    await service.create_session(app_name=sides.app, user_id="ann", session_id="a2")
            # a session object read before another writer's append is stale on both
            stale = [
                await s.get_session(app_name=sides.app, user_id="ann", session_id="a1")
                for s in sides.services
            ]
            await sides.append("ann", "a1", reply("moved on"))
            for service, old in zip(sides.services, stale, strict=True):
                assert old is not None
                with pytest.raises(StaleSessionError):
                    await service.append_event(old, user_text("too late"))
            await sides.delete("ann", "a1")
            assert await sides.get("ann", "a1") == [None, None]
            assert [s["id"] for s in _both_same(await sides.listed("ann"))] == ["a2"]
            await sides.delete("ann", "never-made")  # deleting nothing is not an error
            again = _both_same(await sides.create("ann", "a1"))
            assert again["state"] == {}
            assert again["events"] == []
        finally:
            await sides.close()

    asyncio.run(go())


# --- a Hypothesis-driven sequence of operations ---------------------------------------------

KEYS = st.sampled_from(["n", "app:flag", "user:pref", "temp:t", "other"])
DELTAS = st.dictionaries(KEYS, st.integers(0, 9) | st.text(max_size=3), max_size=3)


def run_sequence(daemon: Daemon, workdir: Path, test_id: str) -> None:
    counter = itertools.count()

    class AdkDifferential(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            self.loop = asyncio.new_event_loop()
            n = next(counter)
            self.sides = Sides(daemon, workdir / f"m{n}", f"{workdir.name}-{n}")
            self.prefix = f"h{next(counter)}-"
            self.sessions: list[tuple[str, str]] = []
            self.open_calls: dict[tuple[str, str], list[str]] = {}

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        @rule(user=st.sampled_from(["ann", "bob"]), state=DELTAS)
        def create(self, user: str, state: dict[str, Any]) -> None:
            sid = f"{self.prefix}{next(counter)}"
            _both_same(self.run(self.sides.create(user, sid, state)))
            self.sessions.append((user, sid))

        @rule(data=st.data(), kind=st.sampled_from(["user", "reply", "call"]), delta=DELTAS)
        def append(self, data: st.DataObject, kind: str, delta: dict[str, Any]) -> None:
            if not self.sessions:
                return
            key = data.draw(st.sampled_from(self.sessions))
            open_ids = self.open_calls.get(key, [])
            if open_ids:  # a call is answered before the conversation moves on, as ADK does
                event = responses(*open_ids, delta=delta)
                self.open_calls[key] = []
            elif kind == "call":
                ids = [f"call-{next(counter)}" for _ in range(data.draw(st.integers(1, 2)))]
                event = calls(*ids)
                self.open_calls[key] = ids
            else:
                event = user_text("u", delta) if kind == "user" else reply("r", delta)
            self.run(self.sides.append(*key, event))

        @rule(data=st.data(), n=st.none() | st.integers(0, 6), after=st.none() | st.integers(0, 8))
        def get(self, data: st.DataObject, n: int | None, after: int | None) -> None:
            if not self.sessions:
                return
            key = data.draw(st.sampled_from(self.sessions))
            config: dict[str, Any] = {}
            if n is not None:
                config["num_recent_events"] = n
            if after is not None:  # some event's time, or a time between two
                whole = _both_same(self.run(self.sides.get(*key)))
                stamps = [e["timestamp"] for e in whole["events"]] or [0.0]
                config["after_timestamp"] = stamps[min(after, len(stamps) - 1)] + (after % 2) * 1e-4
            _both_same(self.run(self.sides.get(*key, **config)))

        @rule(data=st.data())
        def delete(self, data: st.DataObject) -> None:
            if not self.sessions:
                return
            key = data.draw(st.sampled_from(self.sessions))
            self.run(self.sides.delete(*key))
            self.sessions.remove(key)

        @invariant()
        def listings_agree(self) -> None:
            if hasattr(self, "sides"):
                mine = [
                    s
                    for s in _both_same(self.run(self.sides.listed()))
                    if s["id"].startswith(self.prefix)
                ]
                assert len(mine) == len(self.sessions)

        def teardown(self) -> None:
            if hasattr(self, "sides"):
                self.run(self.sides.close())
                self.loop.close()

    size = MachineRun(
        int(os.environ.get("JOURNALD_DIFF_EXAMPLES", 15)),
        int(os.environ.get("JOURNALD_DIFF_STEPS", 20)),
    )
    run_machine(AdkDifferential, size, test_id)


@pytest.mark.slow
def test_a_random_sequence_of_operations_reads_the_same_on_both_services(
    daemon: Daemon, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run_sequence(daemon, tmp_path, request.node.nodeid)
