"""History paging by message index with pair alignment (SPEC §9), as a pure function.

A *clean boundary* is an index ``i`` at which a conversation may be cut without separating a
tool_use from its result: ``i == 0``, ``i == len(messages)``, or ``messages[i]`` does not
carry a tool_result block (a user message holding tool results answers the assistant turn
just before it, so the two are never split).

``page(messages, offset, limit)``:

* the start aligns *back*: ``offset`` is moved down to the nearest clean boundary (and
  clamped to ``total``); the corrected value is returned as ``offset``;
* the end aligns *forward*: the *requested* ``offset + limit`` is moved up to the nearest
  clean boundary, so ``limit`` is a lower bound (``limit`` messages unless the conversation
  ends first), and ``page(m, total - n, n)`` is always the tail page;
* ``next_offset`` is the end (``total`` at the end). Following ``next_offset`` from 0 visits
  every message exactly once, and each page is self-paired;
* ``limit == 0`` returns no messages, only ``total`` (``offset`` and ``next_offset`` are the
  aligned offset).

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Page:
    messages: list[Message]
    total: int
    offset: int
    next_offset: int


def answers_previous(message: Message) -> bool:
    """True if ``message`` carries tool results (so it belongs with the turn before it)."""
    content = message.get("content")
    if not isinstance(content, list):
        return False
    return any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)


def is_clean(messages: Sequence[Message], i: int) -> bool:
    return i <= 0 or i >= len(messages) or not answers_previous(messages[i])


def align_back(messages: Sequence[Message], i: int) -> int:
    i = max(0, min(i, len(messages)))
    while not is_clean(messages, i):
        i -= 1
    return i


def align_forward(messages: Sequence[Message], i: int) -> int:
    i = max(0, min(i, len(messages)))
    while not is_clean(messages, i):
        i += 1
    return i


def page(messages: Sequence[Message], offset: int, limit: int) -> Page:
    total = len(messages)
    start = align_back(messages, offset)
    if limit <= 0:
        return Page([], total, start, start)
    end = align_forward(messages, min(offset, total) + limit)
    return Page(list(messages[start:end]), total, start, end)


def tail_start(messages: Sequence[Message], keep_last: int) -> int:
    """Where a kept tail of at least ``keep_last`` messages starts (aligned back)."""
    return align_back(messages, len(messages) - max(0, keep_last))
