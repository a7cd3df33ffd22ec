"""Runs with fixed ids and timestamps for the viewer's tests and snapshots, written through a
real daemon's Open + Append (raw stubs, so every record's ``ts`` is ours), and helpers to
wait on the app."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import journald_client as jc
from journald_client.pb import journal_pb2 as pb
from textual.pilot import Pilot
from textual.screen import Screen

from tests.builders import text, tool_use
from tests.integration.rpc import Lease, blocks, stub

WAIT_S = 60.0
"""The bound on a wait for the app (tests.waiting.DEFAULT_TIMEOUT_S says why it is large)."""
FP = jc.compute(
    provider="anthropic",
    model="claude-view",
    system_prompt=["sys"],
    tools=[],
    thinking="off",
    max_tokens=256,
    max_iterations=10_000_000,
)
"""The fingerprint of the runs the viewer's tests write through the client."""


async def until(pilot: Pilot[Any], cond: Callable[[], object], what: str) -> None:
    """Let the app run until ``cond()`` holds (bounded: fails after ``WAIT_S``)."""
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S:g}s waiting for {what}")
        await pilot.pause(0.05)


def ready(app: Any, screen_type: type[Screen[Any]], selector: str, *, focus: bool = True) -> bool:
    """Whether the app's top screen is a ``screen_type`` that has composed ``selector`` and
    (``focus``) focused a widget: keys pressed before that would go nowhere."""
    screen = app.screen
    if not isinstance(screen, screen_type):
        return False
    return bool(screen.query(selector)) and (screen.focused is not None or not focus)


async def until_async(pilot: Pilot[Any], step: Callable[[], Awaitable[bool]], what: str) -> None:
    """Repeat ``step()`` (which may press keys) until it returns True (bounded like ``until``)."""
    deadline = time.monotonic() + WAIT_S
    while not await step():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S:g}s waiting for {what}")
        await pilot.pause(0.05)


def ts(second: int) -> str:
    return f"2026-11-30T12:{second // 60:02d}:{second % 60:02d}.000000Z"


class Writer:
    """A held run whose records carry the timestamps we choose."""

    def __init__(self, target: str, run_id: str, prompt: str, **kw: Any) -> None:
        self.lease = Lease(stub(target), run_id, prompt=prompt, **kw)
        self.iteration = 0

    def _seq(self) -> int:
        return self.lease.next_seq()

    def assistant(self, at: int, *content: dict[str, Any], tokens: int = 0) -> None:
        self.iteration += 1
        has_calls = any(b["type"] == "tool_use" for b in content)
        self.lease.append(
            pb.Record(
                seq=self._seq(),
                ts=ts(at),
                assistant=pb.AssistantPayload(
                    message=pb.Message(role="assistant", content_json=blocks(*content)),
                    iteration=self.iteration,
                    stop_reason="tool_use" if has_calls else "end_turn",
                    usage=pb.Usage(input_tokens=tokens, output_tokens=tokens // 4),
                ),
            )
        )

    def result(self, at: int, tid: str, out: str, error: bool = False) -> None:
        self.lease.append(
            pb.Record(
                seq=self._seq(),
                ts=ts(at),
                tool_result=pb.ToolResultPayload(
                    tool_use_id=tid, content_json=blocks(text(out)), is_error=error
                ),
            )
        )

    def terminal(self, at: int, reason: str = "completed") -> None:
        self.lease.append(
            pb.Record(seq=self._seq(), ts=ts(at), terminal=pb.TerminalPayload(reason=reason))
        )

    def close(self) -> None:
        self.lease.close()


LOG = "\n".join(f"2026-11-30 12:00:{i:02d} INFO step {i} ok" for i in range(12))


def research_run(target: str) -> None:
    """A completed run: text, calls paired with results (one error, one long output)."""
    w = Writer(target, "demo-research", "Summarise why the nightly build failed")
    w.assistant(
        2,
        text("I'll look at the build log and the failing test."),
        tool_use("toolu_01", "read_file", '{"path":"logs/nightly.txt"}'),
        tool_use("toolu_02", "run_tests", '{"filter":"test_parser"}'),
        tokens=1200,
    )
    w.result(3, "toolu_01", LOG)
    w.result(4, "toolu_02", "FAILED test_parser.py::test_empty_input - IndexError", error=True)
    w.assistant(5, text("The parser indexes an empty list; the fix is a guard."), tokens=800)
    w.terminal(6)
    w.close()


def pending_run(target: str) -> Writer:
    """A run held by ``tester`` with an open turn: one of three calls answered."""
    w = Writer(target, "demo-pending", "Refactor the storage layer", name="tester")
    w.assistant(
        10,
        text("Three files to read first."),
        tool_use("toolu_11", "read_file", '{"path":"storage/file.py"}'),
        tool_use("toolu_12", "read_file", '{"path":"storage/base.py"}'),
        tool_use("toolu_13", "grep", '{"pattern":"fsync"}'),
        tokens=2000,
    )
    w.result(11, "toolu_12", "class Store(Protocol): ...")
    return w


def triage_run(target: str) -> None:
    w = Writer(target, "demo-triage", "Triage the open issues", name="triage")
    w.assistant(8, text("Nothing urgent today."), tokens=300)
    w.terminal(9, "suspended")
    w.close()
