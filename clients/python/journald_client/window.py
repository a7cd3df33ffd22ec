"""Message windows: Open and Fold send the newest messages, History pages the rest.

The daemon answers an Open or a Fold with at most ``message_window`` trailing messages
(``MESSAGE_WINDOW`` by default; 0 asks for all of them in one answer), so the answer stays
under its max message size however long the run is; ``messages_offset`` says how many came
before. The clients keep their API: reading ``state.messages`` returns every message.

* ``Earlier`` plans the History calls that fetch the messages before a window (pages of
  about ``PAGE_BYTES``) and checks that the pages still line up with the window in hand: they
  must run back to back from 0, and the message at the window's start must still be the one
  the window begins with (a later append may only have grown it). A compaction or restore in
  between breaks that, and ``ConversationChanged`` says to read the state again. A page over
  the daemon's max message size (``response_too_large``) is asked again at half the size.
* ``lazily`` (sync client) returns the state with its earlier messages fetched on the first
  read of ``messages``; the asyncio client fetches them before it returns the state
  (``splice``), as attribute reads cannot await.

Free of I/O, like ``codec``: the transports make the calls.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, MutableSequence
from typing import Any, TypeVar

from journald_proto import journal_pb2 as pb

from journald_client import errors
from journald_client.state import GovernedView, Message, RunState

MESSAGE_WINDOW = 1000
"""Messages an Open or Fold asks the daemon for (the newest; 0 = every message at once)."""

PAGE_BYTES = 4 * 1024 * 1024
"""About how many bytes of messages one History call brings when fetching the messages
before a window: the page's message count follows the sizes seen so far (the window's,
then each page's), so a long run of small messages takes few calls."""

FIRST_PAGE = 1000
"""Messages in the first History call when there is no window to size it from."""


def per_page(msgs: Any) -> int:
    """How many messages like ``msgs`` make about ``PAGE_BYTES`` (0: no messages to tell)."""
    size = sum(len(m.content_json) + len(m.role) + 8 for m in msgs)  # 8: field framing
    return max(1, PAGE_BYTES * len(msgs) // max(1, size)) if len(msgs) else 0


def _extends(now: pb.Message, held: pb.Message) -> bool:
    """Whether ``now`` is ``held`` or ``held`` grown by later blocks (an append merges a
    same-role message into the last one)."""
    if now.role != held.role:
        return False
    if now.content_json == held.content_json:
        return True
    grown, before = json.loads(now.content_json), json.loads(held.content_json)
    return isinstance(grown, list) and grown[: len(before)] == before


class Earlier:
    """The History calls that fetch messages ``[0, offset)`` of a list whose window (held by
    the caller) starts with ``first`` (None: the window is empty)."""

    def __init__(
        self,
        run_id: str,
        view: pb.HistoryView.ValueType,
        offset: int,
        first: pb.Message | None,
        page: int = FIRST_PAGE,
    ) -> None:
        self.run_id, self.view, self.offset = run_id, view, offset
        self.first = first
        # the last page reaches the window's first message, to check it is still the same
        self.end = offset + (1 if first is not None else 0)
        self.page = max(1, page)
        self.ceiling = 1 << 62  # lowered by a page over the daemon's max message size
        self.at = 0
        self.messages: list[pb.Message] = []

    def request(self) -> pb.HistoryRequest | None:
        """The next call to make, or None when every earlier message is in ``messages``."""
        if self.at >= self.end:
            return None
        limit = min(self.page, self.end - self.at)
        return pb.HistoryRequest(run_id=self.run_id, offset=self.at, limit=limit, view=self.view)

    def too_large(self, err: errors.JournaldError) -> None:
        """A page was over the daemon's max message size: ask for half as many messages."""
        if self.page == 1:
            raise err
        self.page = self.ceiling = self.page // 2

    def add(self, page: pb.HistoryResponse) -> None:
        if page.offset != self.at or page.next_offset <= self.at or page.total < self.offset:
            raise self._changed()
        self.messages.extend(page.messages)
        self.at = page.next_offset
        self.page = min(per_page(page.messages) or self.page, self.ceiling)
        if self.at < self.end:
            return
        if self.first is None:
            if self.at != self.offset:
                raise self._changed()
        elif len(self.messages) <= self.offset or not _extends(
            self.messages[self.offset], self.first
        ):
            raise self._changed()
        del self.messages[self.offset :]

    def _changed(self) -> errors.ConversationChanged:
        return errors.ConversationChanged(
            f"run {self.run_id}: the conversation changed (a compaction or restore) while "
            f"the {self.offset} messages before the window were being read; read the state "
            "again (fold())",
            metadata={"run_id": self.run_id},
        )


def earlier_for(
    run_id: str, view: pb.HistoryView.ValueType, msgs: Any, offset: int
) -> Earlier | None:
    """The plan for a list answered from ``offset`` on (None: nothing came before it)."""
    if offset <= 0:
        return None
    first = None
    if len(msgs):
        first = pb.Message()
        first.CopyFrom(msgs[0])
    return Earlier(run_id, view, offset, first, per_page(msgs) or FIRST_PAGE)


def splice(msgs: MutableSequence[pb.Message], earlier: list[pb.Message]) -> None:
    """Put the earlier messages in front of a window, in place."""
    whole = [*earlier, *msgs]
    del msgs[:]
    msgs.extend(whole)


# --- lazily completed state (sync client) ---------------------------------------------

T = TypeVar("T", RunState, GovernedView)


class _Lazy:
    """Mixin: ``messages`` is fetched on first read. Until then its slot is empty, so the
    normal lookup fails and ``__getattr__`` runs; afterwards the slot is read directly."""

    __slots__ = ()
    _slot: Any  # the slot descriptor of ``messages`` (read it from the class, not self)
    _base: type

    def __getattr__(self, name: str) -> Any:
        if name != "messages":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        lock: threading.Lock = object.__getattribute__(self, "_lock")
        with lock:
            try:
                return type(self)._slot.__get__(self)  # another thread fetched them meanwhile
            except AttributeError:
                pass
            fetch: Callable[[], list[Message]] = object.__getattribute__(self, "_fetch")
            window: list[Message] = object.__getattribute__(self, "_window")
            whole = [*fetch(), *window]
            type(self)._slot.__set__(self, whole)
            return whole

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._base):
            return NotImplemented
        return all(
            getattr(self, f.name) == getattr(other, f.name)
            for f in dataclasses.fields(self._base)
            if f.compare
        )


class _LazyRunState(_Lazy, RunState):
    __slots__ = ("_fetch", "_lock", "_window")
    _slot = RunState.__dict__["messages"]
    _base = RunState


class _LazyGovernedView(_Lazy, GovernedView):
    __slots__ = ("_fetch", "_lock", "_window")
    _slot = GovernedView.__dict__["messages"]
    _base = GovernedView


def lazily(value: T, fetch: Callable[[], list[Message]], **changes: Any) -> T:
    """``value`` (holding only its window of messages), with ``changes``, whose ``messages``
    are the earlier ones ``fetch`` returns followed by the window, fetched on first read."""
    cls = _LazyRunState if isinstance(value, RunState) else _LazyGovernedView
    out: Any = object.__new__(cls)
    for f in dataclasses.fields(value):
        v = changes[f.name] if f.name in changes else getattr(value, f.name)
        object.__setattr__(out, f.name, v)
    object.__setattr__(out, "_fetch", fetch)
    object.__setattr__(out, "_window", out.messages)
    object.__setattr__(out, "_lock", threading.Lock())
    cls._slot.__delete__(out)
    return out  # type: ignore[no-any-return]


def replace(value: T, **changes: Any) -> T:
    """``dataclasses.replace`` that keeps unread earlier messages unread."""
    if isinstance(value, _Lazy):
        try:
            type(value)._slot.__get__(value)
        except AttributeError:  # not fetched yet: share the fetch
            fetch = object.__getattribute__(value, "_fetch")
            window = object.__getattribute__(value, "_window")
            return lazily(value, fetch, **changes, messages=window)
    return dataclasses.replace(value, **changes)
