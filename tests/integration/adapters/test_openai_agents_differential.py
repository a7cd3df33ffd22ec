"""Differential test (issue 26): the same agent runs on a JournaldSession and on the SDK's own
SQLiteSession (file db) through the same operations, and after each one the stored items and
every input the model was handed are compared.

The model is the SDK's ScriptedModel answering from its input: two parallel function calls
(``call_1``/``call_2`` in every turn, as scripted models and some providers reuse ids), a tool
that ``needs_approval``, plain replies. The operations: ``Runner.run``, ``run_sync``,
``run_streamed``, approving or rejecting a pending call, ``add_items``, ``pop_item``,
``clear_session``, limited reads, and a crash (the session object dropped unclosed, an
approval forgotten) followed by a fresh session object on the same storage.

Sizes: ``DIFF_SIZES`` by Hypothesis profile; ``JOURNALD_DIFF_EXAMPLES``/``JOURNALD_DIFF_STEPS``
override them for a long local run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from journald_client.openai_agents import JournaldSession

from tests.daemon import Daemon
from tests.integration.adapters.test_langgraph_differential import diff_size
from tests.integration.adapters.test_openai_agents_patterns import lookup, pay
from tests.profiles import run_machine

set_tracing_disabled(True)


def _text(item: Any) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def decide(call: Any) -> Any:
    """The scripted model's answer to what it was handed."""
    items = list(call.input) if isinstance(call.input, list) else []
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        return [assistant_message(f"done after {len(items)}")]
    said = _text(last) if last.get("role") == "user" else ""
    if "tools" in said:
        return [
            function_call("lookup", {"q": "a"}, call_id="call_1"),
            function_call("lookup", {"q": "b"}, call_id="call_2"),
        ]
    if "pay" in said:
        return [function_call("pay", {"amount": 5}, call_id="call_1")]
    return [assistant_message(f"reply to {len(items)}")]


class Side:
    """One session kind: its agent, model, session object and what the model was handed."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.session = make()
        self.model = ScriptedModel([ModelStep.respond(decide) for _ in range(400)])
        self.agent = Agent(name="a", model=self.model, tools=[lookup, pay])
        self.pending: Any = None  # the last result with interruptions (an approval waiting)

    def inputs(self) -> list[str]:
        return [json.dumps(c.input, sort_keys=True, default=str) for c in self.model.calls]


def run_differential(daemon: Daemon, workdir: Path, test_id: str) -> None:
    counter = iter(range(10**9))

    class AgentsDifferential(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            sid = f"s{next(counter)}"
            db = workdir / "agents.sqlite"
            sock = str(daemon.socket)
            self.sides = {
                "journald": Side(lambda: JournaldSession(sid, socket=sock)),
                "sqlite": Side(lambda: SQLiteSession(sid, db)),
            }

        def teardown(self) -> None:
            for side in getattr(self, "sides", {}).values():
                side.session.close()

        def each(self, op: Any) -> None:
            outcomes = {}
            for name, side in self.sides.items():
                try:
                    outcomes[name] = ("ok", op(side))
                except Exception as exc:  # the same failure on both is agreement
                    outcomes[name] = ("error", type(exc).__name__)
            assert outcomes["journald"] == outcomes["sqlite"], outcomes

        @staticmethod
        def _outcome(side: Side, result: Any) -> Any:
            side.pending = result if result.interruptions else None
            return (str(result.final_output), len(result.interruptions))

        @rule(
            text=st.sampled_from(["hi", "tools please", "pay 5", "and then?"]),
            how=st.sampled_from(["run", "run_sync", "run_streamed"]),
        )
        def run(self, text: str, how: str) -> None:
            def go(side: Side) -> Any:
                if how == "run_sync":
                    result = Runner.run_sync(side.agent, text, session=side.session)
                elif how == "run":
                    result = asyncio.run(Runner.run(side.agent, text, session=side.session))
                else:

                    async def streamed() -> Any:
                        res = Runner.run_streamed(side.agent, text, session=side.session)
                        async for _ in res.stream_events():
                            pass
                        return res

                    result = asyncio.run(streamed())
                return self._outcome(side, result)

            self.each(go)

        @rule(approve=st.booleans())
        def answer_the_approval(self, approve: bool) -> None:
            def go(side: Side) -> Any:
                if side.pending is None:
                    return None
                state = side.pending.to_state()
                for item in side.pending.interruptions:
                    (state.approve if approve else state.reject)(item)
                result = asyncio.run(Runner.run(side.agent, state, session=side.session))
                return self._outcome(side, result)

            self.each(go)

        @rule(text=st.sampled_from(["typed", "more"]))
        def add_items(self, text: str) -> None:
            self.each(
                lambda side: asyncio.run(
                    side.session.add_items([{"role": "user", "content": text}])
                )
            )

        @rule()
        def pop_item(self) -> None:
            self.each(lambda side: asyncio.run(side.session.pop_item()))

        @rule()
        def clear_session(self) -> None:
            self.each(lambda side: asyncio.run(side.session.clear_session()))

        @rule()
        def crash_then_fresh_session(self) -> None:
            for side in self.sides.values():
                side.pending = None  # the approval died with the process
                side.session = side.make()  # the old object is dropped unclosed

        @rule(limit=st.integers(0, 8))
        def limited_read(self, limit: int) -> None:
            ours = asyncio.run(self.sides["journald"].session.get_items(limit=limit))
            theirs = asyncio.run(self.sides["sqlite"].session.get_items(limit=limit))
            assert len(ours) >= len(theirs)
            assert ours[len(ours) - len(theirs) :] == theirs

        @invariant()
        def same_items_and_model_inputs(self) -> None:
            if not hasattr(self, "sides"):
                return
            j, s = self.sides["journald"], self.sides["sqlite"]
            assert asyncio.run(j.session.get_items()) == asyncio.run(s.session.get_items())
            assert j.inputs() == s.inputs()

    run_machine(AgentsDifferential, diff_size(), test_id)


def test_journald_session_shows_what_sqlite_session_shows(daemon: Daemon, tmp_path: Path) -> None:
    run_differential(
        daemon,
        tmp_path,
        "tests/integration/adapters/test_openai_agents_differential.py::"
        "test_journald_session_shows_what_sqlite_session_shows",
    )
