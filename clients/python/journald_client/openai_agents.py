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

``get_items`` returns what ``SQLiteSession`` would: the stored items, the latest ``limit``
of them, except that a window never starts between a call and its output (it starts at the
call instead, so it never holds fewer items than asked when more exist). A call without an
output is returned as it is (it may be waiting for an approval; the SDK drops a call it cannot
pair when it builds the model input); the conversation mirror closes such a call with an
error result once the session moves on, so ``journald replay`` stays paired. ``pop_item``
removes the last item and rewrites the conversation with an ``edit`` rebase;
``clear_session`` empties both.

A session is the run ``oa-<session id>``, apart from any LangGraph thread of the same id.
A write takes the run's writer lease and the session gives it back ``idle_release_s`` after
its last write (a run's writes pay one Open): a new session object of the same process (one
per request, the usual web-handler pattern) takes an idle lease over at once, and another
process writing the same session waits up to ``lock_wait_s`` for it. ``hold_lease=True``
keeps the lease from the first write until ``close()`` (or the end of the process): another
process writing the session meanwhile is refused ``locked`` naming this one. ``close()``
works called plainly (as ``SQLiteSession.close()``) or awaited. Calls go through the sync
client on a worker thread, so one session serves ``Runner.run``, ``run_sync`` and
``run_streamed`` alike, whatever event loop they use.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from journald_client import errors
from journald_client._closed import Closed as _Closed
from journald_client.client import Client, Run, connect
from journald_client.codec import Entry, prefixed_run_id, run_id_for
from journald_client.fingerprint import Fingerprint, compute
from journald_client.state import Block, StateEntry

NS_ITEMS = "openai_agents.items"
INLINE_MAX_BYTES = 4096
FINGERPRINT: Fingerprint = compute(provider="openai-agents", model="session", system_prompt=[])
SESSION_LABEL = "openai_agents.session_id"
LOCKED_WAIT_S = 5.0
"""How long a write waits for another writer's lease (held while it writes, then idle)."""
IDLE_RELEASE_S = 0.5
"""A session gives its lease back this long after its last write (unless ``hold_lease``):
a run's writes come in quick succession and pay one Open; the next request's session, or
another process, gets the lease soon after."""
_IDLE_HOLDERS: weakref.WeakValueDictionary[tuple[str, str], JournaldSession] = (
    weakref.WeakValueDictionary()
)
"""Sessions of this process holding an idle lease, by (daemon, run): a new session object on
the same id (one per request) takes the lease over at once instead of waiting."""
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
    """The history to hand the model, as ``SQLiteSession`` gives it: the stored items, the
    latest ``limit`` of them (all when None or negative, none when 0). A window that would
    start inside a tool round starts earlier instead, at the call of every output it holds,
    so it never has fewer than ``limit`` items when more exist and never cuts an output from
    its call. Everything else is as stored, as ``SQLiteSession`` returns it: a call without an
    output may be waiting for an approval (``needs_approval``), and an output whose call was
    popped stays; the SDK drops what it cannot pair when it builds the model input."""
    if limit is not None and limit >= 0:
        start = max(0, len(items) - limit) if limit else len(items)
    else:
        start = 0
    # each output answers the latest call of its id before it (ids repeat across turns)
    latest: dict[Any, int] = {}
    call_of: dict[int, int] = {}
    for n, item in enumerate(items):
        role = _role(item)
        if role == "call":
            latest[item.get("call_id")] = n
        elif role == "output" and item.get("call_id") in latest:
            call_of[n] = latest[item.get("call_id")]
    n = len(items) - 1
    while n >= start:  # newest first: a window grown to a call may take in older outputs
        if n in call_of:
            start = min(start, call_of[n])
        n -= 1
    return list(items[start:])


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
        hold_lease: bool = False,
        lock_wait_s: float = LOCKED_WAIT_S,
        idle_release_s: float = IDLE_RELEASE_S,
    ) -> None:
        self.session_id = session_id
        self.lock_wait_s = lock_wait_s
        self.idle_release_s = idle_release_s
        self._last_write = 0.0
        self._idle_timer: threading.Thread | None = None
        self.session_settings = session_settings
        self.hold_lease = hold_lease
        self._owns_client = client is None
        self.client = client if client is not None else connect(socket, name=name)
        self.name = name
        self._run_id: str | None = None
        self._lock = threading.RLock()
        self._run: Run | None = None
        # key -> item as of journal seq ``_items_seq`` (reused while nobody else wrote)
        self._items: dict[str, Item] = {}
        self._items_seq = -1
        self._open_calls: list[str] = []

    @property
    def run_id(self) -> str:
        """The session's run: ``oa-<session id>`` (a session made before sessions had their
        own namespace keeps its run, found by its label)."""
        if self._run_id is None:
            self._run_id = self._resolve_run_id()
        return self._run_id

    def _resolve_run_id(self) -> str:
        own = prefixed_run_id(self.session_id, "oa-")
        legacy = run_id_for(self.session_id, "oa-")
        if legacy == own:
            return own
        try:
            self.client.fold(own)
            return own
        except errors.SessionNotFound:
            pass
        try:
            labels = self.client.fold(legacy).labels
        except errors.SessionNotFound:
            return own
        return legacy if labels.get(SESSION_LABEL) == self.session_id else own

    # --- plumbing (worker thread) -----------------------------------------------------------

    async def _call(self, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn()

        return await asyncio.to_thread(locked)

    def _writer(self) -> Run:
        if self._run is not None and not self._run.closed:
            return self._run
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                run = self.client.open(
                    self.run_id,
                    FINGERPRINT,
                    [],
                    labels={SESSION_LABEL: self.session_id},
                    name=self.name,
                )
                break
            except errors.Locked as exc:
                idle = _IDLE_HOLDERS.get((self.client.target, self.run_id))
                if exc.holder_pid == os.getpid() and idle is not None and idle is not self:
                    idle._give_back()  # an earlier session object of this process: idle
                    continue
                # another writer's lease ends soon after its last write: wait for it
                if time.monotonic() >= deadline:
                    raise self._in_session_terms(exc) from exc
                time.sleep(0.02)
            except errors.JournaldError as exc:
                raise self._in_session_terms(exc) from exc
        if run.state.last_seq != self._items_seq:  # another writer since: read the items again
            self._items = {
                e.key: self._decode(e) for e in run.state.state if e.namespace == NS_ITEMS
            }
        self._open_calls = [c.id for c in run.open_calls]
        self._run = run
        return run

    def _write(self, fn: Callable[[Run], T]) -> T:
        """One mutation under the lease; the lease is given back after it unless the session
        holds it (``hold_lease``), so the next session object on this id may write."""
        run = self._writer()
        try:
            out = fn(run)
        except errors.JournaldError as exc:
            self._release()
            raise self._in_session_terms(exc) from exc
        except BaseException:
            self._release()
            raise
        self._items_seq = run.last_seq
        if not self.hold_lease:
            self._idle_soon()
        return out

    def _idle_soon(self) -> None:
        """Keep the lease for ``idle_release_s`` after this write, then give it back."""
        self._last_write = time.monotonic()
        _IDLE_HOLDERS[(self.client.target, self.run_id)] = self
        if self.idle_release_s <= 0:
            self._release()
        elif self._idle_timer is None:
            self._idle_timer = threading.Thread(
                target=self._release_when_idle, name="journald-session-idle", daemon=True
            )
            self._idle_timer.start()

    def _release_when_idle(self) -> None:
        while True:
            left = self._last_write + self.idle_release_s - time.monotonic()
            if left > 0:
                time.sleep(left)
                continue
            with self._lock:
                if self._last_write + self.idle_release_s > time.monotonic():
                    continue  # written again meanwhile
                self._idle_timer = None
                self._release()
                return

    def _give_back(self) -> None:
        """Another session object of this process wants the lease: release it now."""
        if self._lock.acquire(timeout=self.lock_wait_s):
            try:
                self._release()
            finally:
                self._lock.release()

    def _release(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None
        key = (self.client.target, self.run_id)
        if _IDLE_HOLDERS.get(key) is self:
            del _IDLE_HOLDERS[key]

    def _in_session_terms(self, exc: errors.JournaldError) -> errors.JournaldError:
        """The error in the SDK's words: what happened to the session and what to do."""
        if isinstance(exc, errors.Locked):
            who = f"pid {exc.holder_pid}" if exc.holder_pid else "another process"
            message = (
                f"Agents session {self.session_id!r} is being written by {who}"
                f"{f' ({exc.holder_name})' if exc.holder_name else ''}: this run's items were "
                "not saved. Wait for that run to end, or use another session id"
            )
        else:
            message = (
                f"Agents session {self.session_id!r}: the items could not be saved "
                f"({exc.code}: {exc.message}); the session keeps the items it had"
            )
        meta = {**exc.metadata, "session_id": self.session_id}
        return type(exc)(message, metadata=meta, diff=exc.diff, status=exc.status)

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
        if state.last_seq == self._items_seq:
            return [self._items[k] for k in sorted(self._items)]
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
        settings, else all), paired so the model accepts it (see ``sendable``)."""
        wanted = resolve_session_limit(limit, self.session_settings)
        items = sendable(await self._call(self._stored), wanted)
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items (and their conversation records) in one durable write."""
        if items:
            plain = cast(list[Item], items)
            await self._call(lambda: self._write(lambda run: self._add(run, plain)))

    def _add(self, run: Run, items: Sequence[Item]) -> None:
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
        return cast("TResponseInputItem | None", await self._call(lambda: self._write(self._pop)))

    def _pop(self, run: Run) -> Item | None:
        if not self._items:
            return None
        key = max(self._items)
        rest = [self._items[k] for k in sorted(self._items) if k != key]
        self._rewrite(run, rest, [Entry.state(NS_ITEMS, key, deleted=True)])
        return self._items.pop(key)

    async def clear_session(self) -> None:
        """Remove every item and empty the conversation."""
        await self._call(lambda: self._write(self._clear))

    def _clear(self, run: Run) -> None:
        self._rewrite(run, [], [Entry.state(NS_ITEMS, "", deleted=True)])
        self._items.clear()

    def _rewrite(self, run: Run, rest: Sequence[Item], changes: list[Entry]) -> None:
        # a rebase may not replace a turn whose calls are open: close them first
        closing = [Entry.tool_result(c, ABANDONED, is_error=True) for c in self._open_calls]
        run.append_many([*changes, *closing, Entry.rebase(conversation(rest))])
        self._open_calls = []

    def close(self) -> _Closed:
        """Release the session's lease (and the connection, if the session made it). Works
        called plainly, as ``SQLiteSession.close()`` is, and awaited (``await
        session.close()``): the work is done by the call, the awaitable is already done."""
        self.close_sync()
        return _Closed()

    def close_sync(self) -> None:
        with self._lock:
            self._release()
            if self._owns_client:
                self.client.close()
