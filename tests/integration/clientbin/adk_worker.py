"""A Google ADK program on JournaldSessionService, for the kill -9 test (a scripted model:
no network).

    --mode first   turn 1 ("find a") calls ``lookup`` and answers; turn 2 ("find b") calls
                   ``slow``, which prints ``TOOL-STARTED`` and waits for ``<dir>/go`` (the test
                   kills the process there)
    --mode resume  one more turn; prints ``INPUT <json>`` (the contents the model was handed)
                   and ``DONE <reply>``
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from journald_client.adk import JournaldSessionService

from tests.integration.clientbin.common import say
from tests.waiting import wait_until

WAIT_S = 120.0
APP, USER = "crashy", "ann"


class ScriptedLlm(BaseLlm):
    """Answers from what it is handed: a call for "find X", a reply after a response."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = llm_request.contents
        say("INPUT " + json.dumps([c.model_dump(mode="json", exclude_none=True) for c in contents]))
        parts = contents[-1].parts or [] if contents else []
        text = " ".join(p.text for p in parts if p.text)
        if any(p.function_response for p in parts):
            answer = types.Part(text=f"{parts[0].function_response.name} is done")  # type: ignore[union-attr]
        elif text.startswith("find "):
            q = text.removeprefix("find ")
            tool = "lookup" if q == "a" else "slow"
            answer = types.Part(function_call=types.FunctionCall(name=tool, args={"q": q}))
        else:
            answer = types.Part(text="I am back")
        yield LlmResponse(content=types.Content(role="model", parts=[answer]))


async def turn(runner: Runner, session_id: str, text: str) -> str:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    last = ""
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        for part in (event.content.parts or []) if event.content else []:
            last = part.text or last
    return last


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--session", required=True)
    ap.add_argument("--mode", choices=["first", "resume"], required=True)
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args()

    def lookup(q: str) -> str:
        """Look a thing up."""
        return f"found {q}"

    def slow(q: str) -> str:
        """Take a long time."""
        say("TOOL-STARTED")
        wait_until((args.dir / "go").exists, what="the test's go file", timeout_s=WAIT_S)
        return "slow result"

    service = JournaldSessionService(socket=args.socket, name=f"adk-{args.mode}")
    agent = LlmAgent(name="helper", model=ScriptedLlm(), tools=[lookup, slow])
    runner = Runner(agent=agent, app_name=APP, session_service=service)
    if args.mode == "first":
        await service.create_session(app_name=APP, user_id=USER, session_id=args.session)
        await turn(runner, args.session, "find a")
        say("TURN-1-DONE")
        await turn(runner, args.session, "find b")
        say("DONE")
    else:
        say("DONE " + await turn(runner, args.session, "are you still there?"))
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
