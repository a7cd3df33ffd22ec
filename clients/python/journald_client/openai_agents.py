"""``JournaldSession``: an OpenAI Agents SDK session on journald
(``pip install 'journald-client[openai-agents]'``).

    from journald_client.openai_agents import JournaldSession

    session = JournaldSession("user-42")
    result = await Runner.run(agent, "hello", session=session)

A session is a journald run. Every item is kept exactly as the SDK gave it (its JSON bytes,
as a framework state record keyed by its position), so ``get_items`` returns the items that
were added, byte for byte. The items that map onto the conversation are mirrored into it in
the same durable append (user messages, assistant messages, reasoning, function calls and
their outputs), so ``journald replay`` and governance work on agent sessions.

``get_items`` never hands the model a broken history: an output whose call is not in the
returned items is left out, and a call that never got its output (the process died while
the tool ran) is followed by a synthetic error output; such repairs are the only difference
from what was stored. ``pop_item`` removes the last item and rewrites the conversation with
an ``edit`` rebase; ``clear_session`` empties both.

The session holds the run's writer lease from its first write until ``close()`` (or the end
of the process): a second process writing the same session is refused ``locked`` naming the
first. Calls go through the sync client on a worker thread, so one session serves
``Runner.run``, ``run_sync`` and ``run_streamed`` alike, whatever event loop they use.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from journald_client import errors
from journald_client.client import Client, Run, connect
from journald_client.codec import Entry, run_id_for
from journald_client.fingerprint import Fingerprint, compute
from journald_client.state import Block, StateEntry

NS_ITEMS = "openai_agents.items"
INLINE_MAX_BYTES = 4096
FINGERPRINT: Fingerprint = compute(provider="openai-agents", model="session", system_prompt=[])
SESSION_LABEL = "openai_agents.session_id"
ABANDONED = (
    "journald: this tool call never returned (the process stopped while it ran); its "
    "outcome is unknown. Check any state it may have changed before running it again."
)
Item = dict[str, Any]
T = TypeVar("T")


def _item_key(position: int) -> str:
    return f"{position:016d}"


# --- the conversation mirror (pure) ---------------------------------------------------------


def _text_parts(content: Any, wanted: tuple[str, ...]) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[Block] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, Mapping) and part.get("type") in wanted:
            out.append({"type": "text", "text": str(part.get("text", part.get("refusal", "")))})
        else:
            out.append({"type": "provider", "provider": "openai", "data": _json(part)})
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _role(item: Mapping[str, Any]) -> str:
    """user, assistant (a model output block), call, output, or other (not conversation)."""
    kind, role = item.get("type"), item.get("role")
    if kind == "function_call" and item.get("call_id"):
        return "call"
    if kind == "function_call_output":
        return "output"
    if kind in (None, "message") and role in ("user", "assistant"):
        return str(role)
    if kind == "reasoning":
        return "assistant"
    return "other"


def _assistant_blocks(item: Mapping[str, Any]) -> list[Block]:
    if item.get("type") == "function_call":
        return [
            {
                "type": "tool_use",
                "id": str(item["call_id"]),
                "name": str(item.get("name") or "function"),
                "input": str(item.get("arguments") or "{}"),
            }
        ]
    if item.get("type") == "reasoning":
        return [{"type": "provider", "provider": "openai", "data": _json(item)}]
    return _text_parts(item.get("content"), ("output_text", "refusal"))


def _output_blocks(item: Mapping[str, Any]) -> list[Block]:
    out = item.get("output")
    if isinstance(out, str):
        return [{"type": "text", "text": out}]
    return [{"type": "provider", "provider": "openai", "data": _json(out)}]


def mirror_entries(items: Sequence[Mapping[str, Any]], open_calls: list[str]) -> list[Entry]:
    """Conversation records for newly added items (``open_calls``: the calls the conversation
    has not answered yet, updated in place). Consecutive model outputs make one assistant
    record; a call still open when the conversation moves on is closed with an error."""
    out: list[Entry] = []
    blocks: list[Block] = []

    def close_open() -> None:
        out.extend(Entry.tool_result(c, ABANDONED, is_error=True) for c in open_calls)
        open_calls.clear()

    def flush() -> None:
        if not blocks:
            return
        close_open()
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        out.append(Entry.assistant(list(blocks), stop_reason="tool_use" if calls else "end_turn"))
        open_calls.extend(dict.fromkeys(calls))
        blocks.clear()

    for item in items:
        role = _role(item)
        if role in ("assistant", "call"):
            new = _assistant_blocks(item)
            seen = {b["id"] for b in blocks if b["type"] == "tool_use"}
            blocks.extend(b for b in new if b["type"] != "tool_use" or b["id"] not in seen)
        elif role == "output":
            flush()
            cid = str(item.get("call_id", ""))
            if cid in open_calls:
                open_calls.remove(cid)
                out.append(Entry.tool_result(cid, _output_blocks(item)))
        elif role == "user":
            flush()
            content = _text_parts(item.get("content"), ("input_text",))
            if content:
                close_open()
                out.append(Entry.user(content))
    flush()
    return out


def conversation(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The whole item list as journald messages (for an ``edit`` rebase)."""
    msgs: list[dict[str, Any]] = []

    def add(role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if msgs and msgs[-1]["role"] == role:
            msgs[-1]["content"] = [*msgs[-1]["content"], *blocks]
        else:
            msgs.append({"role": role, "content": blocks})

    for item in items:
        role = _role(item)
        if role in ("assistant", "call"):
            add("assistant", _assistant_blocks(item))
        elif role == "output":
            block = {
                "type": "tool_result",
                "tool_use_id": str(item.get("call_id", "")),
                "content": _output_blocks(item),
                "is_error": False,
            }
            add("user", [block])
        elif role == "user":
            add("user", _text_parts(item.get("content"), ("input_text",)))
    return msgs


def sendable(items: Sequence[Item], limit: int | None) -> list[Item]:
    """The history to hand the model: the latest ``limit`` items (all when None or
    negative, none when 0), with every output paired to a call before it and every call
    followed by an output (a synthetic error output for a call that never returned)."""
    answered = {i.get("call_id") for i in items if _role(i) == "output"}
    fixed: list[Item] = []
    for n, item in enumerate(items):
        fixed.append(item)
        nxt = items[n + 1] if n + 1 < len(items) else None
        if _role(item) == "call" and (nxt is None or _role(nxt) != "call"):
            # the end of a run of calls: their outputs follow here (or never came)
            group = []
            for prev in reversed(fixed):
                if _role(prev) != "call":
                    break
                group.append(prev)
            for call in reversed(group):
                if call.get("call_id") not in answered:
                    fixed.append(
                        {
                            "type": "function_call_output",
                            "call_id": call["call_id"],
                            "output": ABANDONED,
                        }
                    )
    if limit is not None and limit >= 0:
        fixed = fixed[len(fixed) - limit :] if limit else []
    calls: set[Any] = set()
    out: list[Item] = []
    for item in fixed:
        role = _role(item)
        if role == "call":
            calls.add(item.get("call_id"))
        if role == "output" and item.get("call_id") not in calls:
            continue  # its call is not in this history: the model would refuse it
        out.append(item)
    return out


# --- the session ----------------------------------------------------------------------------


class JournaldSession:
    """An Agents SDK ``Session`` whose history is a journald run (see the module doc)."""

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        client: Client | None = None,
        *,
        socket: str | None = None,
        name: str = "openai-agents",
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self._owns_client = client is None
        self.client = client if client is not None else connect(socket, name=name)
        self.name = name
        self.run_id = run_id_for(session_id, "oa-")
        self._lock = threading.RLock()
        self._run: Run | None = None
        self._items: dict[str, Item] = {}  # key -> item, kept while the lease is held
        self._open_calls: list[str] = []

    # --- plumbing (worker thread) -----------------------------------------------------------

    async def _call(self, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn()

        return await asyncio.to_thread(locked)

    def _writer(self) -> Run:
        if self._run is not None and not self._run.closed:
            return self._run
        run = self.client.open(
            self.run_id, FINGERPRINT, [], labels={SESSION_LABEL: self.session_id}, name=self.name
        )
        self._items = {e.key: self._decode(e) for e in run.state.state if e.namespace == NS_ITEMS}
        self._open_calls = [c.id for c in run.open_calls]
        self._run = run
        return run

    def _decode(self, e: StateEntry) -> Item:
        data = self.client.get_attachment(self.run_id, e.sha256) if e.sha256 else e.data
        item: Item = json.loads(data)
        return item

    def _stored(self) -> list[Item]:
        if self._run is not None and not self._run.closed:
            return [self._items[k] for k in sorted(self._items)]
        try:
            state = self.client.fold(self.run_id)
        except errors.SessionNotFound:
            return []
        entries = sorted((e for e in state.state if e.namespace == NS_ITEMS), key=lambda e: e.key)
        return [self._decode(e) for e in entries]

    def _value(self, key: str, item: Item) -> Entry:
        data = json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()
        if len(data) <= INLINE_MAX_BYTES:
            return Entry.state(NS_ITEMS, key, "json", data)
        att = self.client.put_attachment(self.run_id, data, "application/json", key)
        return Entry.state(NS_ITEMS, key, "json", sha256=att.sha256, size=att.size)

    # --- the Session protocol ---------------------------------------------------------------

    # The SDK's item type is a union of TypedDicts; inside, an item is the plain dict it is
    # at run time, so the protocol methods cast at this boundary only.

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first: the latest ``limit`` items (None: the session's
        settings, else all), paired so the model accepts it (see the module doc)."""
        wanted = resolve_session_limit(limit, self.session_settings)
        items = sendable(await self._call(self._stored), wanted)
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items (and their conversation records) in one durable write."""
        if items:
            plain = cast(list[Item], items)
            await self._call(lambda: self._add(plain))

    def _add(self, items: Sequence[Item]) -> None:
        run = self._writer()
        start = int(max(self._items)) + 1 if self._items else 0
        keyed = {_item_key(start + n): dict(item) for n, item in enumerate(items)}
        open_calls = list(self._open_calls)
        entries = [self._value(k, i) for k, i in keyed.items()]
        entries += mirror_entries(list(keyed.values()), open_calls)
        run.append_many(entries)
        self._items.update(keyed)
        self._open_calls = open_calls

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item; the conversation is rewritten without it."""
        return cast("TResponseInputItem | None", await self._call(self._pop))

    def _pop(self) -> Item | None:
        run = self._writer()
        if not self._items:
            return None
        key = max(self._items)
        rest = [self._items[k] for k in sorted(self._items) if k != key]
        self._rewrite(run, rest, [Entry.state(NS_ITEMS, key, deleted=True)])
        return self._items.pop(key)

    async def clear_session(self) -> None:
        """Remove every item and empty the conversation."""
        await self._call(self._clear)

    def _clear(self) -> None:
        run = self._writer()
        self._rewrite(run, [], [Entry.state(NS_ITEMS, "", deleted=True)])
        self._items.clear()

    def _rewrite(self, run: Run, rest: Sequence[Item], changes: list[Entry]) -> None:
        # a rebase may not replace a turn whose calls are open: close them first
        closing = [Entry.tool_result(c, ABANDONED, is_error=True) for c in self._open_calls]
        run.append_many([*changes, *closing, Entry.rebase(conversation(rest))])
        self._open_calls = []

    async def close(self) -> None:
        """Release the session's lease (and the connection, if the session made it)."""
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        with self._lock:
            if self._run is not None:
                self._run.close()
                self._run = None
            if self._owns_client:
                self.client.close()
