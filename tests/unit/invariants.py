"""Checks shared by the property tests: is a message list something a model API accepts?"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def as_json(value: Any) -> str:
    """A structural comparison key (independent of journald's own encoder)."""
    # a sealed message log (journald.core.message_log) compares as the list it reads as
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=list)


def _ids(msg: dict[str, Any], kind: str, key: str) -> list[str]:
    return [b[key] for b in msg["content"] if b.get("type") == kind]


def model_ready_problems(msgs: Sequence[dict[str, Any]]) -> list[str]:
    """Every way ``msgs`` breaks the pairing contract (empty when it is model-ready).

    Contract: starts with a user message; roles alternate; no message is empty; a user
    message's tool_results lead its content, answer only tool_uses of the assistant message
    just before it, each exactly once, and answer all of them; an assistant message has
    no repeated tool_use id; a tool_use only ever appears in an assistant message and a
    tool_result only in a user message; the first user message holds no tool_result.
    """
    problems: list[str] = []
    if msgs and msgs[0]["role"] != "user":
        problems.append("does not start with a user message")
    for i, m in enumerate(msgs):
        if m["role"] not in ("user", "assistant"):
            problems.append(f"message {i} has role {m['role']!r}")
        if not m["content"]:
            problems.append(f"message {i} ({m['role']}) is empty")
        if i and msgs[i - 1]["role"] == m["role"]:
            problems.append(f"messages {i - 1} and {i} are both {m['role']}")
        misplaced = "tool_result" if m["role"] == "assistant" else "tool_use"
        if any(blk.get("type") == misplaced for blk in m["content"]):
            problems.append(f"message {i} ({m['role']}) holds a {misplaced} block")
        if m["role"] == "assistant":
            uses = _ids(m, "tool_use", "id")
            if len(set(uses)) != len(uses):
                problems.append(f"message {i} repeats a tool_use id: {uses}")
            if uses:
                nxt = msgs[i + 1] if i + 1 < len(msgs) else None
                answered = _ids(nxt, "tool_result", "tool_use_id") if nxt else []
                if nxt is None or nxt["role"] != "user" or set(answered) != set(uses):
                    problems.append(f"tool_uses {uses} of message {i} are not all answered next")
        else:
            results = _ids(m, "tool_result", "tool_use_id")
            if len(set(results)) != len(results):
                problems.append(f"message {i} answers an id twice: {results}")
            prev = msgs[i - 1] if i else None
            allowed = set(_ids(prev, "tool_use", "id")) if prev else set()
            if prev is None or prev["role"] != "assistant":
                allowed = set()
            orphans = set(results) - allowed
            if orphans:
                problems.append(f"message {i} holds orphan tool_results {sorted(orphans)}")
            types = [b.get("type") for b in m["content"]]
            if any(t != "tool_result" for t in types[: len(results)]):
                problems.append(f"message {i}: tool_results do not lead the content")
    return problems
