"""Build well-formed records and journals for tests (one vocabulary for every suite)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from journald.core import fingerprint
from journald.core.records import GENESIS, Record, make_record

TS = "2026-11-30T12:00:00.000000Z"
FP = fingerprint.compute(
    provider="anthropic",
    model="claude-test",
    system_prompt=["You are a careful agent."],
    tools=[{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
    thinking="off",
    max_tokens=1024,
    max_iterations=20,
)


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(tid: str, name: str = "read", input_json: str = '{"path":"a.txt"}') -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": input_json}


def meta_payload(run_id: str, prompt: str = "hello", interactive: bool = False) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "created": TS,
        "fingerprint": FP.as_json(),
        "prompt": [text(prompt)] if prompt else [],
        "interactive": interactive,
    }


def assistant_payload(
    content: Sequence[dict[str, Any]], iteration: int = 1, stop_reason: str | None = None
) -> dict[str, Any]:
    has_calls = any(b["type"] == "tool_use" for b in content)
    return {
        "message": {"role": "assistant", "content": list(content)},
        "iteration": iteration,
        "stop_reason": stop_reason or ("tool_use" if has_calls else "end_turn"),
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_tokens": 0,
            "cache_creation_tokens": 0,
        },
    }


def result_payload(tid: str, out: str = "ok", is_error: bool = False) -> dict[str, Any]:
    return {"tool_use_id": tid, "content": [text(out)], "is_error": is_error, "remote": False}


def user_payload(t: str) -> dict[str, Any]:
    return {"content": [text(t)]}


def terminal_payload(reason: str = "completed", message: str = "") -> dict[str, Any]:
    return {"reason": reason, "message": message}


class JournalBuilder:
    """Append payloads with seq and hash chain handled: ``b.add("assistant", {...})``."""

    def __init__(self, run_id: str = "run-1", prompt: str = "hello", interactive: bool = False):
        self.run_id = run_id
        self.records: list[Record] = []
        self.add("meta", meta_payload(run_id, prompt, interactive))

    def add(self, kind: str, payload: dict[str, Any]) -> Record:
        prev = self.records[-1].hash if self.records else GENESIS
        rec = make_record(len(self.records) + 1, kind, payload, prev, TS)
        self.records.append(rec)
        return rec

    def turn(
        self,
        calls: Sequence[str],
        answered: Sequence[str] | None = None,
        iteration: int | None = None,
    ) -> None:
        """An assistant turn calling ``calls`` and the results for ``answered`` (default all)."""
        it = (
            iteration
            if iteration is not None
            else sum(1 for r in self.records if r.kind == "assistant") + 1
        )
        content = [text("thinking aloud")] + [tool_use(c) for c in calls]
        self.add("assistant", assistant_payload(content, it))
        for c in calls if answered is None else answered:
            self.add("tool_result", result_payload(c, f"result of {c}"))


def unlinked(seq: int, kind: str, payload: dict[str, Any]) -> Record:
    """A record whose prev is left for the journal to link (as the daemon hands them over)."""
    return make_record(seq, kind, payload, GENESIS, TS)
