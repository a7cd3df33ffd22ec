"""An OpenAI Agents SDK program on JournaldSession, for the kill -9 test (scripted model from
``agents.testing``: no network).

    --mode first   turn 1 calls ``lookup`` and answers; turn 2 calls ``slow``, which prints
                   ``TOOL-STARTED`` and waits for ``<dir>/go`` (the test kills it there)
    --mode resume  one more turn; prints ``INPUT <json>`` (what the model was sent) and ``DONE``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from journald_client.openai_agents import JournaldSession

from tests.integration.clientbin.common import say
from tests.waiting import wait_until

WAIT_S = 120.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--session", required=True)
    ap.add_argument("--mode", choices=["first", "resume"], required=True)
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args()
    set_tracing_disabled(True)

    @function_tool
    def lookup(q: str) -> str:
        """Look a thing up."""
        return f"found {q}"

    @function_tool
    def slow(q: str) -> str:
        """Take a long time."""
        say("TOOL-STARTED")
        wait_until((args.dir / "go").exists, what="the test's go file", timeout_s=WAIT_S)
        return "slow result"

    session = JournaldSession(args.session, socket=args.socket, name=f"agent-{args.mode}")
    if args.mode == "first":
        model = ScriptedModel(
            [
                [function_call("lookup", {"q": "a"}, call_id="call_1")],
                [assistant_message("a is found")],
                [function_call("slow", {"q": "b"}, call_id="call_2")],
                [assistant_message("b is found")],
            ]
        )
        agent = Agent(name="agent", model=model, tools=[lookup, slow])
        Runner.run_sync(agent, "find a", session=session)
        say("TURN-1-DONE")
        Runner.run_sync(agent, "find b", session=session)
        say("DONE")
        return
    model = ScriptedModel([[assistant_message("I am back")]])
    agent = Agent(name="agent", model=model, tools=[lookup, slow])
    result = Runner.run_sync(agent, "are you still there?", session=session)
    say("INPUT", json.dumps(model.first_call.input if model.first_call else None))
    say("DONE", result.final_output)


if __name__ == "__main__":
    main()
