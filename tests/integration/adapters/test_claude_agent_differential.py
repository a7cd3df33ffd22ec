"""A differential state machine: ``JournaldSessionStore`` against the SDK's
``InMemorySessionStore`` (behind the same uuid idempotency the journald store keeps), on a
real daemon, through random appends to main and subagent transcripts of a few sessions in two
projects, targeted and cascading deletes, and appends from a new store object standing in for a new
process (it must rebuild what the lease's writer knows from the run). After every step every
transcript, listing, subkey list and session summary agrees, entries to the byte. The tail
and attachment part limits are shrunk so that tails roll into segments and segments split
into parts within a few steps."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import journald_client as jc
import pytest
from claude_agent_sdk import InMemorySessionStore
from claude_agent_sdk.types import SessionKey, SessionListSubkeysKey
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from journald_client import claude_agent
from journald_client.claude_agent import JournaldSessionStore

from tests.daemon import Daemon
from tests.profiles import PROFILE, MachineRun, run_machine

pytestmark = pytest.mark.shared_daemon("file")
PROJECTS = ("p", "q")
SESSIONS = ("s1", "s2")
SUBPATHS = (None, "subagents/agent-1", "subagents/agent-2")
SIZE = MachineRun(24, 12) if PROFILE == "ci" else MachineRun(12, 12)
"""Each step compares the transcript it touched; reading every transcript and listing (~40
calls) is a rule of its own, drawn as often as the others, not an invariant after each step."""

scalars = st.one_of(
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def entries(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(0, 3))):
        entry: dict[str, Any] = {"type": draw(st.sampled_from(["user", "assistant", "summary"]))}
        uuid = draw(st.none() | st.sampled_from([f"u{n}" for n in range(6)]))
        if uuid is not None:
            entry["uuid"] = uuid
        entry["v"] = draw(values)
        entry["pad"] = "x" * draw(st.sampled_from([0, 40, 200, 700]))
        if draw(st.booleans()):
            entry["customTitle"] = draw(st.text(max_size=8))
        out.append(entry)
    return out


class Deduplicating:
    """The in-memory store behind the journald store's idempotency rule: an entry whose
    ``uuid`` the transcript holds is not stored again."""

    def __init__(self) -> None:
        self.inner = InMemorySessionStore()
        self.uuids: dict[tuple[str, str, str | None], set[str]] = {}

    async def append(self, key: SessionKey, batch: list[Any]) -> None:
        seen = self.uuids.setdefault(
            (key["project_key"], key["session_id"], key.get("subpath")), set()
        )
        fresh = []
        for e in batch:
            if isinstance(e.get("uuid"), str):
                if e["uuid"] in seen:
                    continue
                seen.add(e["uuid"])
            fresh.append(e)
        if fresh:
            await self.inner.append(key, fresh)

    async def delete(self, key: SessionKey) -> None:
        await self.inner.delete(key)
        for k in list(self.uuids):
            same = k[:2] == (key["project_key"], key["session_id"])
            if same and (key.get("subpath") is None or k[2] == key.get("subpath")):
                del self.uuids[k]


def key_of(project: str, session: str, subpath: str | None) -> SessionKey:
    key: SessionKey = {"project_key": project, "session_id": session}
    if subpath is not None:
        key["subpath"] = subpath
    return key


KEYS = [
    *[key_of("p", "s1", None)] * 3,  # one session most of the time, so steps meet its state
    *[key_of("p", "s1", "subagents/agent-1")] * 2,
    key_of("p", "s1", "subagents/agent-2"),
    key_of("p", "s2", None),
    key_of("q", "s1", None),  # the same session id in another project
    key_of("q", "s2", "subagents/agent-1"),  # a subagent transcript with no main one
]
keys = st.sampled_from(KEYS)


def text(loaded: list[Any] | None) -> list[str] | None:
    return None if loaded is None else [json.dumps(e, ensure_ascii=False) for e in loaded]


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claude_agent, "INLINE_MAX_BYTES", 900)
    monkeypatch.setattr(claude_agent, "TAIL_BUDGET_BYTES", 1500)
    monkeypatch.setattr(claude_agent, "PART_MAX_BYTES", 1000)


def test_journald_store_shows_what_the_in_memory_store_shows(
    daemon: Daemon, small_limits: None
) -> None:
    prefixes = (f"diff{n}" for n in itertools.count())
    client = jc.connect(str(daemon.socket), name="differential")

    class StoreDifferential(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            self.prefix = next(prefixes)
            self.ours = JournaldSessionStore(client, prefix=self.prefix)
            self.theirs = Deduplicating()

        def teardown(self) -> None:
            if hasattr(self, "ours"):
                self.ours.close()

        @rule(key=keys, batch=entries(), new_process=st.booleans())
        def append(self, key: SessionKey, batch: list[Any], new_process: bool) -> None:
            if new_process:  # a new store object: it must rebuild what the writer knows
                self.ours.close()
                self.ours = JournaldSessionStore(client, prefix=self.prefix)
            asyncio.run(self.ours.append(key, batch))
            asyncio.run(self.theirs.append(key, batch))
            self.same_transcript(key)

        @rule(key=keys)
        def delete(self, key: SessionKey) -> None:
            asyncio.run(self.ours.delete(key))
            asyncio.run(self.theirs.delete(key))
            self.same_transcript(key)

        def same_transcript(self, key: SessionKey) -> None:
            ours, theirs = (
                asyncio.run(self.ours.load(key)),
                asyncio.run(self.theirs.inner.load(key)),
            )
            assert text(ours) == text(theirs), key

        @rule()
        def same_everywhere(self) -> None:
            ours, theirs = self.ours, self.theirs.inner

            async def compare() -> None:
                for project, session, sub in itertools.product(PROJECTS, SESSIONS, SUBPATHS):
                    key = key_of(project, session, sub)
                    assert text(await ours.load(key)) == text(await theirs.load(key)), key
                for project in PROJECTS:
                    mine = sorted(s["session_id"] for s in await ours.list_sessions(project))
                    other = sorted(s["session_id"] for s in await theirs.list_sessions(project))
                    assert mine == other, project
                    mine_s = {
                        s["session_id"]: s["data"]
                        for s in await ours.list_session_summaries(project)
                    }
                    other_s = {
                        s["session_id"]: s["data"]
                        for s in await theirs.list_session_summaries(project)
                    }
                    assert mine_s == other_s, project
                    for session in SESSIONS:
                        k: SessionListSubkeysKey = {"project_key": project, "session_id": session}
                        assert sorted(await ours.list_subkeys(k)) == sorted(
                            await theirs.list_subkeys(k)
                        )

            asyncio.run(compare())

    try:
        run_machine(
            StoreDifferential,
            SIZE,
            "tests/integration/adapters/test_claude_agent_differential.py::"
            "test_journald_store_shows_what_the_in_memory_store_shows",
        )
    finally:
        client.close()
