"""A process mirroring one Claude Agent SDK session through ``JournaldSessionStore``, for the
process tests. Modes:

* ``steady``: append batches ``--start``, ``--start``+1, ... (``--batches`` of them, or until
  killed), printing ``ACKED <n>`` once each append returned; every fourth batch also goes to
  the subagent transcript ``subagents/agent-1``;
* ``hold``: append batch 0, print ``HELD``, and keep the lease until killed;
* ``mirror``: hand batch 0 to the SDK's own transcript mirror (``TranscriptMirrorBatcher``,
  what ``query()`` runs), printing ``MIRROR-ERROR <text>`` for each batch it reports dropped,
  then ``STORED <entries>``.

    python -m tests.integration.adapters.store_worker --socket S --mode steady [--start N]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from pathlib import Path
from typing import Any

from claude_agent_sdk.types import SessionKey, SessionStoreEntry
from journald_client.claude_agent import JournaldSessionStore

KEY: SessionKey = {"project_key": "-home-dev-app", "session_id": "3f1c2a9e-proc-test"}
SUB: SessionKey = {**KEY, "subpath": "subagents/agent-1"}


def batch(n: int) -> list[SessionStoreEntry]:
    """Batch ``n``: two entries with uuids (keys out of order, floats, non-ASCII, U+2028,
    nesting) and one without, as Claude Code writes titles and markers."""
    entries: list[dict[str, Any]] = [
        {
            "type": "assistant",
            "uuid": f"u{n}-{i}",
            "parentUuid": f"u{n}-{i - 1}" if i else None,
            "z": 0.1 * n + i,
            "message": {"content": [{"type": "text", "text": f"héllo ☃ \u2028 {n}.{i}"}]},
            "a": [1e-7, 2**60, None, True, {"y": "", "b": -0.0}],
        }
        for i in range(2)
    ]
    entries.append({"type": "last-prompt", "lastPrompt": f"prompt {n}"})
    return [SessionStoreEntry(**e) for e in entries]  # type: ignore[typeddict-item]


def say(line: str) -> None:
    print(line, flush=True)


async def steady(store: JournaldSessionStore, start: int, count: int | None) -> None:
    numbers = itertools.count(start) if count is None else range(start, start + count)
    for n in numbers:
        await store.append(KEY, batch(n))
        if n % 4 == 0:
            await store.append(SUB, batch(n))
        say(f"ACKED {n}")


async def mirror(store: JournaldSessionStore, tmp: Path) -> None:
    from claude_agent_sdk._internal.transcript_mirror_batcher import TranscriptMirrorBatcher

    async def report(key: Any, error: str) -> None:
        say(f"MIRROR-ERROR {error}")

    batcher = TranscriptMirrorBatcher(store=store, projects_dir=str(tmp), on_error=report)
    path = tmp / KEY["project_key"] / f"{KEY['session_id']}.jsonl"
    batcher.enqueue(str(path), batch(0))
    await batcher.flush()
    say(f"STORED {len(await store.load(KEY) or [])}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--mode", choices=["steady", "hold", "mirror"], required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    async with JournaldSessionStore(socket=args.socket, name=f"store-{args.mode}") as store:
        if args.mode == "steady":
            await steady(store, args.start, args.batches)
        elif args.mode == "hold":
            await store.append(KEY, batch(0))
            say("HELD")
            await asyncio.Event().wait()  # until killed
        else:
            await mirror(store, Path(args.dir))
    say("DONE")


if __name__ == "__main__":
    asyncio.run(main())
