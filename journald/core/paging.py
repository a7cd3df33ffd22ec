"""History paging by message index with pair alignment, as a pure function
(docs/design.md#history-paging).

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pages builds on this module (``is_clean``): only its type is needed here
    from journald.core.pages import PageResolver

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


# --- paging from the tail (for segmented runs) ------------------------------------------------
#
# A reader that must not fold a whole long run needs, at some seq S, a *fold mark*: how many
# messages the fold holds after S, the role of the last one, and whether a turn is open.
# ``MessageCounter`` computes marks record by record without keeping message content, so a
# store can keep one per sealed segment (e.g. in its manifest). ``fold_window`` then folds only
# the records after a mark, and ``page_window`` serves any page that starts after the mark's
# last message: the cost grows with the distance from the end, not with the run's length.
#
# Exact for every journal the fold accepts, except one that reuses a tool_use id of an earlier
# turn in a later assistant turn (the fold treats its result as a duplicate; a window fold
# cannot know the id was answered before the mark).


@dataclass(frozen=True, slots=True)
class FoldMark:
    seq: int  # the last record counted
    messages: int  # len(fold(records[:seq]).messages)
    last_role: str  # role of the last of them ("" when none)
    pending_seq: int  # seq of the assistant record of the open turn (0: none)


class MessageCounter:
    """The fold's message count, followed record by record (content-free)."""

    def __init__(self) -> None:
        self.seq = 0
        self.count = 0
        self.last_role = ""
        self.llm_calls = 0
        self.pending_seq = 0
        self.calls: list[str] = []
        self.answered: set[str] = set()  # within the open turn

    def mark(self) -> FoldMark:
        return FoldMark(self.seq, self.count, self.last_role, self.pending_seq)

    def _append(self, role: str) -> None:
        if self.last_role != role:
            self.count += 1
            self.last_role = role

    def _commit(self) -> None:
        self._append("assistant")
        self._append("user")
        self.pending_seq, self.calls, self.answered = 0, [], set()

    def add(self, kind: str, seq: int, payload: Mapping[str, Any]) -> None:
        self.seq = seq
        if kind == "meta":
            self.count, self.last_role = (1, "user") if payload.get("prompt") else (0, "")
        elif kind == "assistant":
            if self.pending_seq:
                self._commit()
            self.llm_calls += 1
            content = (payload.get("message") or {}).get("content") or []
            calls = [str(b["id"]) for b in content if b.get("type") == "tool_use"]
            if calls:
                self.pending_seq, self.calls, self.answered = seq, calls, set()
            else:
                self._append("assistant")
        elif kind == "tool_result":
            tid = payload.get("tool_use_id")
            # the fold's rule: an open call of the pending turn, ids unique per turn
            if not self.pending_seq or tid not in self.calls or tid in self.answered:
                return
            self.answered.add(str(tid))
            if all(c in self.answered for c in self.calls):
                self._commit()
        elif kind == "user":
            if self.pending_seq:
                self._commit()
            self._append("user")
        elif kind == "rebase":
            msgs = payload.get("messages") or []
            self.count = len(msgs)
            self.last_role = str(msgs[-1]["role"]) if msgs else ""
            self.pending_seq, self.calls, self.answered = 0, [], set()


@dataclass(frozen=True, slots=True)
class Window:
    """The fold's messages from global index ``base`` on (``messages[0]`` may be a stand-in
    for the message at ``base`` when ``partial_first``); ``total`` is the whole count."""

    base: int
    messages: list[Message]
    total: int
    partial_first: bool
    last_seq: int = 0  # of the last record folded
    pending: Any = None  # the fold's open turn after that record (``journald.core.fold.Pending``)


def fold_window(
    mark: FoldMark, records: Sequence[Any], pages: PageResolver | None = None
) -> Window:
    """Fold ``records`` (every record after ``mark.seq``, in order; ``mark.pending_seq`` must
    be 0: start at an earlier mark otherwise) continuing the message list of the mark.
    ``pages`` reads the pages of a paged rebase among them (``journald.core.pages``)."""
    from journald.core.fold import RunState, fold_into
    from journald.core.message_log import MessageLog

    if mark.pending_seq:
        raise ValueError("fold_window needs a mark without an open turn")
    seed = RunState(last_seq=mark.seq)
    seed.counters.llm_calls = 1
    if mark.messages:
        seed.messages = MessageLog([{"role": mark.last_role, "content": []}])
    st = fold_into(seed, records, pages)
    if any(r.kind == "rebase" for r in records):  # the window replaced everything before
        return Window(0, list(st.messages), len(st.messages), False, st.last_seq, st.pending)
    base = max(0, mark.messages - 1)
    return Window(
        base,
        list(st.messages),
        base + len(st.messages),
        bool(mark.messages),
        st.last_seq,
        st.pending,
    )


def page_window(w: Window, offset: int, limit: int) -> Page | None:
    """The page ``page(all_messages, offset, limit)`` computed from a window, or None when
    the page would need messages before the window (fold from an earlier mark)."""
    first_full = w.base + (1 if w.partial_first else 0)
    offset = max(0, min(offset, w.total))
    msgs: list[Message] = w.messages

    def at(i: int) -> Message:
        return msgs[i - w.base]

    def clean(i: int) -> bool:  # ``is_clean`` on global indexes (index 0 is always clean)
        return i <= 0 or i >= w.total or not answers_previous(at(i))

    start = offset
    while start > first_full and not clean(start):
        start -= 1
    if start < w.total and (start < first_full or not clean(start)):
        return None  # the aligned start lies before the window
    if limit <= 0:
        return Page([], w.total, start, start)
    end = min(offset + limit, w.total)
    while not clean(end):
        end += 1
    return Page([at(i) for i in range(start, end)], w.total, start, end)
