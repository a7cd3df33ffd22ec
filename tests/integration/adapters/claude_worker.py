"""A Claude Agent SDK agent in its own process, for the tests: ``query()`` runs the bundled
``claude`` CLI (against the scripted Messages API named by ``ANTHROPIC_BASE_URL``) with a
``JournaldSessionStore`` mirroring the session to the daemon at ``--socket``.

Prints, one line each, flushed: ``SESSION <id>`` (the CLI's init), ``ACKED <uuid> ...`` after
each append the store acknowledged, ``MIRROR-ERROR <text>`` for a ``MirrorErrorMessage``,
``RESULT <text>`` at the end of the query and ``DONE`` when the store is closed.

    python -m tests.integration.adapters.claude_worker --socket S --cwd DIR --prompt P
        [--resume SESSION_ID]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    MirrorErrorMessage,
    ResultMessage,
    SystemMessage,
    query,
)
from journald_client.claude_agent import JournaldSessionStore


def say(line: str) -> None:
    print(line, flush=True)


class ReportingStore(JournaldSessionStore):
    async def append(self, key: Any, entries: Any) -> None:
        await super().append(key, entries)
        uuids = [str(e["uuid"]) for e in entries if isinstance(e.get("uuid"), str)]
        say(f"ACKED {key.get('subpath') or 'main'} {' '.join(uuids)}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--resume", default=None)
    args = parser.parse_args()
    async with ReportingStore(socket=args.socket, name="claude-worker") as store:
        options = ClaudeAgentOptions(
            cwd=args.cwd,
            resume=args.resume,
            session_store=store,
            session_store_flush="eager",
            allowed_tools=["Read", "Agent", "Task"],
            max_turns=4,
        )
        async for message in query(prompt=args.prompt, options=options):
            if isinstance(message, MirrorErrorMessage):
                say(f"MIRROR-ERROR {message.error}")
            elif isinstance(message, SystemMessage) and message.subtype == "init":
                say(f"SESSION {message.data.get('session_id')}")
            elif isinstance(message, ResultMessage):
                say(f"RESULT {message.result}")
    say("DONE")


if __name__ == "__main__":
    asyncio.run(main())
