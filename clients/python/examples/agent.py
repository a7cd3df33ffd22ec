#!/usr/bin/env python3
"""A complete, runnable agent on journald: a scripted (deterministic) model and real tools.

It surveys a directory: lists it, then for each of the first few files takes its SHA-256,
counts its words and reads its first line (several tool calls in one turn), and finishes with
a report built from the journaled results. Every step is journaled before it is acted on, so
the agent can be killed at any moment and resumed:

    journald serve &                                   # the daemon (default socket)
    python agent.py --run-id survey-1 --dir . --crash-after 3   # dies after 3 tool results
    python agent.py --run-id survey-1 --dir . --resume          # finishes the pending turn

On ``--resume`` the agent re-opens the run (same fingerprint), runs only the tool calls the
journal has no result for (``complete_pending``), and continues the loop from the journaled
conversation: the model sees exactly the history it would have seen without the crash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import journald_client as jc

SYSTEM_PROMPT = [
    "You are a careful file-survey agent.",
    "Use the tools to inspect files; never guess their contents.",
]
TOOLS: list[dict[str, Any]] = [
    {
        "name": "list_dir",
        "description": "List the entries of a directory (relative to the workspace).",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "read_file",
        "description": "Return the first line of a text file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "sha256_file",
        "description": "Return the SHA-256 hex digest of a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "word_count",
        "description": "Count the words of a text file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
]
MAX_FILES = 3
MAX_ITERATIONS = 6


def say(*parts: object) -> None:
    print("[agent]", *parts, flush=True)


# --- tools (real ones) -----------------------------------------------------------------


class Tools:
    """The tools, confined to one workspace directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, rel: str) -> Path:
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise PermissionError(f"{rel} is outside the workspace")
        return p

    def run(self, call: jc.ToolCall) -> str:
        args = call.input
        fn = getattr(self, call.name, None)
        if fn is None:
            raise LookupError(f"unknown tool {call.name}")
        out: str = fn(args["path"])
        return out

    def list_dir(self, path: str) -> str:
        entries = sorted(os.listdir(self._path(path)))
        return json.dumps(entries)

    def read_file(self, path: str) -> str:
        with open(self._path(path), encoding="utf-8", errors="replace") as fh:
            return fh.readline().rstrip("\n")

    def sha256_file(self, path: str) -> str:
        h = hashlib.sha256()
        with open(self._path(path), "rb") as fh:
            for chunk in iter(lambda: fh.read(65536), b""):
                h.update(chunk)
        return h.hexdigest()

    def word_count(self, path: str) -> str:
        with open(self._path(path), encoding="utf-8", errors="replace") as fh:
            return str(sum(len(line.split()) for line in fh))


# --- the scripted model ----------------------------------------------------------------


@dataclass
class Turn:
    content: list[dict[str, Any]]
    stop_reason: str
    usage: dict[str, int]


def _results(messages: list[dict[str, Any]]) -> dict[str, tuple[str, bool]]:
    """Every tool result in the conversation by tool_use id: (text, is_error)."""
    out: dict[str, tuple[str, bool]] = {}
    for m in messages:
        for b in m["content"]:
            if b.get("type") == "tool_result":
                text = "".join(c.get("text", "") for c in b["content"])
                out[b["tool_use_id"]] = (text, bool(b["is_error"]))
    return out


def _calls(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        b["id"]: b
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    }


class ScriptedModel:
    """A deterministic stand-in for a model: its next turn is a pure function of the
    conversation, so a resumed run continues exactly as an uninterrupted one would."""

    def next_turn(self, messages: list[dict[str, Any]], iteration: int) -> Turn:
        usage = {"input_tokens": 100 * iteration, "output_tokens": 20}
        results = _results(messages)
        if iteration == 1:
            return Turn(
                [
                    {"type": "text", "text": "I'll start by listing the workspace."},
                    _use(iteration, 0, "list_dir", {"path": "."}),
                ],
                "tool_use",
                usage,
            )
        if iteration == 2:
            listing, failed = results.get(_id(1, 0), ("[]", True))
            names = [] if failed else json.loads(listing)
            files = [n for n in names if not n.startswith(".")][:MAX_FILES]
            blocks: list[dict[str, Any]] = [
                {"type": "text", "text": f"Inspecting {len(files)} file(s): {', '.join(files)}."}
            ]
            i = 0
            for name in files:
                for tool in ("sha256_file", "word_count", "read_file"):
                    blocks.append(_use(iteration, i, tool, {"path": name}))
                    i += 1
            if len(blocks) > 1:
                return Turn(blocks, "tool_use", usage)
        calls = _calls(messages)
        lines = ["Survey report:"]
        for tid, call in calls.items():
            if call["name"] == "list_dir":
                continue
            text, failed = results.get(tid, ("(no result)", True))
            arg = json.loads(call["input"])["path"]
            lines.append(f"- {arg} {call['name']}: {'ERROR ' if failed else ''}{text}")
        return Turn([{"type": "text", "text": "\n".join(lines)}], "end_turn", usage)


def _id(iteration: int, i: int) -> str:
    return f"toolu_{iteration:02d}_{i:02d}"


def _use(iteration: int, i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": _id(iteration, i), "name": name, "input": args}


# --- the loop --------------------------------------------------------------------------


class Agent:
    def __init__(self, run: jc.Run, tools: Tools, crash_after: int | None) -> None:
        self.run = run
        self.tools = tools
        self.crash_after = crash_after
        self.results_written = 0

    def execute(self, call: jc.ToolCall) -> str:
        say(f"tool {call.name}({call.input_json}) [{call.id}]")
        return self.tools.run(call)

    def journal_result(self, call: jc.ToolCall) -> None:
        try:
            out, is_error = self.execute(call), False
        except Exception as exc:  # a failing tool is a result the model should see
            out, is_error = f"{type(exc).__name__}: {exc}", True
        ack = self.run.tool_result(call.id, out, is_error=is_error)
        say(f"  -> journaled result seq {ack.seq}{' (error)' if is_error else ''}: {out[:60]}")
        self.tick()

    def tick(self) -> None:
        self.results_written += 1
        if self.crash_after is not None and self.results_written >= self.crash_after:
            say(f"simulating a crash after {self.results_written} tool result(s): SIGKILL")
            os.kill(os.getpid(), signal.SIGKILL)

    def recover(self) -> None:
        pending = self.run.state.pending
        if pending is None:
            say("nothing pending: continuing from the journaled conversation")
            return
        say(
            f"pending turn at seq {pending.seq}: {len(pending.answered_ids)} result(s) "
            f"journaled, {len(pending.unanswered)} call(s) to run"
        )

        def journaled(call: jc.ToolCall, ack: jc.Ack) -> None:
            say(f"  -> journaled result seq {ack.seq} for {call.id}")
            self.tick()

        self.run.complete_pending(self.execute, on_result=journaled)

    def loop(self, model: ScriptedModel) -> str:
        while True:
            state = self.run.fold()
            iteration = state.next_iteration
            if iteration > MAX_ITERATIONS:
                self.run.terminal("max_iterations", f"stopped after {MAX_ITERATIONS} model calls")
                return "max_iterations"
            turn = model.next_turn(state.messages, iteration)
            ack = self.run.assistant(
                turn.content, stop_reason=turn.stop_reason, usage=turn.usage, iteration=iteration
            )
            calls = [
                jc.ToolCall(b["id"], b["name"], json.dumps(b["input"], separators=(",", ":")))
                for b in turn.content
                if b["type"] == "tool_use"
            ]
            say(f"model turn {iteration} journaled at seq {ack.seq} ({len(calls)} tool call(s))")
            if not calls:
                say(turn.content[0]["text"])
                self.run.terminal("completed")
                return "completed"
            for call in calls:
                self.journal_result(call)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-id", required=True, help="the run to start or resume")
    ap.add_argument("--resume", action="store_true", help="resume an interrupted run")
    ap.add_argument("--dir", default=".", help="the workspace the tools may read")
    ap.add_argument("--socket", default=None, help="daemon socket (default: the usual path)")
    ap.add_argument(
        "--crash-after", type=int, default=None, help="SIGKILL self after N tool results"
    )
    # an agent started with its daemon, or while it restarts, on a busy machine, waits for it
    # rather than failing at the first slow answer (connect's own default is 5 s)
    ap.add_argument(
        "--connect-timeout-s",
        type=float,
        default=30.0,
        help="how long to wait for the daemon to answer (default 30)",
    )
    args = ap.parse_args(argv)

    fp = jc.compute(
        provider="scripted",
        model="scripted-survey-1",
        system_prompt=SYSTEM_PROMPT,
        tools=TOOLS,
        thinking="off",
        max_tokens=1024,
        max_iterations=MAX_ITERATIONS,
    )
    tools = Tools(Path(args.dir))
    try:
        client = jc.connect(args.socket, name="example-agent", timeout=args.connect_timeout_s)
    except jc.DaemonUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    with client:
        try:
            if args.resume:
                run = client.resume(args.run_id, fp)
                say(f"resumed run {args.run_id} at seq {run.last_seq}")
                for w in run.state.warnings:
                    say(f"warning {w.code}: {w.message}")
            else:
                run = client.start(
                    args.run_id,
                    fp,
                    f"Survey the files in {tools.root.name or '/'}.",
                    labels={"example": "agent"},
                )
                say(f"started run {args.run_id}")
        except jc.JournaldError as exc:
            print(f"cannot open run {args.run_id}: {exc}", file=sys.stderr)
            return 1
        with run:
            agent = Agent(run, tools, args.crash_after)
            if args.resume:
                agent.recover()
            outcome = agent.loop(ScriptedModel())
            state = run.fold()
            c = state.counters
            say(
                f"run {args.run_id} {outcome}: {c.llm_calls} model call(s), "
                f"{c.tool_calls} tool result(s), last seq {state.last_seq}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
