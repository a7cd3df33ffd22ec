"""An agent writing through a pipelined writer (window 16) until a stop file appears: each
step journals an assistant record with ``--calls`` tool calls, waits for its ack (the tools
may run only then), and streams the results behind it without waiting. Prints every
acknowledged record (``ACK seq hash duplicate``) once its ack is in, then ``completed`` and
``DONE last_seq reconnects``. ``--aio`` does the same with the asyncio client.

The daemon may be killed and restarted underneath with appends in flight: the writer
re-opens the run and resends what is unanswered, with the same seqs and bytes."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Sequence
from typing import Any

import journald_client as jc
from journald_client.codec import Entry

from tests.integration.clientbin.common import FP, say, writer_args

WINDOW = 16


def turn(step: int, calls: int) -> tuple[Entry, list[Entry]]:
    uses = [
        {"type": "tool_use", "id": f"toolu_{step}_{i}", "name": "read", "input": {"i": i}}
        for i in range(calls)
    ]
    assistant = Entry.assistant(
        [{"type": "text", "text": f"step {step}"}, *uses], stop_reason="tool_use"
    )
    results = [Entry.tool_result(f"toolu_{step}_{i}", f"result {step}.{i}") for i in range(calls)]
    return assistant, results


def stopped(stop_file: str) -> bool:
    return os.path.exists(stop_file)


def report(acks: Sequence[jc.Ack]) -> None:
    for ack in acks:
        say("ACK", ack.seq, ack.hash, ack.duplicate)


def run_sync(args: argparse.Namespace) -> None:
    with (
        jc.Client(args.socket, name="pipelined-writer", reconnect_timeout=60.0) as client,
        client.start(args.run_id, FP, f"pipelined {args.run_id}") as run,
    ):
        say("ACK", run.last_seq, run.state.last_hash, False)  # the meta record, from Open
        streamed: list[jc.Pending[jc.Ack]] = []
        with run.pipelined(window=WINDOW) as w:
            for step in range(args.max_steps):
                if stopped(args.stop_file):
                    break
                assistant, results = turn(step, args.calls)
                acked = w.append(assistant).ack()  # everything before it is acked too
                report([p.ack() for p in streamed] + [acked])
                streamed = [w.append(r) for r in results]
        report([p.ack() for p in streamed])
        report([run.terminal("completed")])
        say("DONE", run.last_seq, run.reconnects)


async def run_async(args: argparse.Namespace) -> None:
    async with (
        await jc.connect_async(
            args.socket, name="pipelined-writer", reconnect_timeout=60.0
        ) as client,
        await client.start(args.run_id, FP, f"pipelined {args.run_id}") as run,
    ):
        say("ACK", run.last_seq, run.state.last_hash, False)
        streamed: list[Any] = []
        async with run.pipelined(window=WINDOW) as w:
            for step in range(args.max_steps):
                if stopped(args.stop_file):
                    break
                assistant, results = turn(step, args.calls)
                acked = await (await w.append(assistant))
                report([await p for p in streamed] + [acked])
                streamed = [await w.append(r) for r in results]
        report([await p for p in streamed])
        report([await run.terminal("completed")])
        say("DONE", run.last_seq, run.reconnects)


def main() -> None:
    ap = writer_args()
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--aio", action="store_true")
    args = ap.parse_args()
    if args.aio:
        asyncio.run(run_async(args))
    else:
        run_sync(args)


if __name__ == "__main__":
    main()
