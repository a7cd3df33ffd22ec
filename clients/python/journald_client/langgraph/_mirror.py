"""Mirror a graph's ``messages`` channel (LangChain messages) into conversation records, so
``journald replay``, governance and the viewer work on LangGraph threads.

At each ``put`` of the root namespace, the messages the conversation does not hold yet are
appended in the same batch as the checkpoint: a ``HumanMessage`` as a user record, an
``AIMessage`` as an assistant record (text and tool calls as tool_use blocks), a
``ToolMessage`` as the tool_result of its call. System messages stay out. When the list no
longer extends what was mirrored (a message removed or replaced, time travel to an older
checkpoint), the conversation is replaced by an ``edit`` rebase of the list up to its last
tool-calling turn, and that turn and the rest follow as records (so its calls are open again
and the results the graph adds next answer them). The
journal's rules hold throughout: a call the graph never answered is closed with an error
result before the conversation moves on. What was mirrored is remembered as a count and a
digest of the message ids (one small state record), so a new process continues the mirror.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from journald_client.codec import Entry
from journald_client.state import Block, RunState

NS_MIRROR = "langgraph.mirror"
KEY_MESSAGES = "messages"
ABANDONED = "journald: the graph moved on without answering this tool call; its outcome is unknown."


def _digest(ids: Sequence[str]) -> str:
    h = hashlib.sha256()
    for i in ids:
        h.update(i.encode() + b"\x00")
    return h.hexdigest()


def _text_blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[Block] = []
    for part in content or []:
        if isinstance(part, str):
            out.append({"type": "text", "text": part})
        elif isinstance(part, Mapping) and part.get("type") == "text":
            out.append({"type": "text", "text": str(part.get("text", ""))})
        else:
            data = json.dumps(part, ensure_ascii=False, sort_keys=True, default=str)
            out.append({"type": "provider", "provider": "langchain", "data": data})
    return out


def _result_text(content: Any) -> list[Block]:
    blocks = _text_blocks(content)
    return blocks or [{"type": "text", "text": ""}]


@dataclass(slots=True)
class Mirror:
    """What has been mirrored (count and digest of ids) and the calls still open."""

    count: int = 0
    digest: str = field(default_factory=lambda: _digest([]))
    open_calls: list[str] = field(default_factory=list)
    _next: tuple[int, str, list[str]] | None = None

    @classmethod
    def of(cls, state: RunState) -> Mirror:
        out = cls(open_calls=[c.id for c in state.pending.unanswered] if state.pending else [])
        for e in state.state:
            if e.namespace == NS_MIRROR and e.key == KEY_MESSAGES and e.data:
                doc = json.loads(e.data)
                out.count, out.digest = int(doc["count"]), str(doc["digest"])
        return out

    def entries(
        self, ns: str, checkpoint: Mapping[str, Any], channel: str | None, run: Any
    ) -> list[Entry]:
        """The records mirroring the checkpoint's messages (empty when nothing changed)."""
        self._next = None
        if channel is None or ns != "":
            return []
        msgs = (checkpoint.get("channel_values") or {}).get(channel)
        if not isinstance(msgs, list) or not all(isinstance(m, BaseMessage) for m in msgs):
            return []
        ids = [str(m.id) for m in msgs]
        if any(m.id is None for m in msgs):
            return []
        if len(ids) == self.count and _digest(ids) == self.digest:
            return []
        open_calls = list(self.open_calls)
        out: list[Entry] = []
        if len(ids) > self.count and _digest(ids[: self.count]) == self.digest:
            for m in msgs[self.count :]:
                out += _entries_for(m, open_calls)
        else:
            out += [_abandon(c) for c in open_calls]
            open_calls.clear()
            # A rebase cannot leave a call open (the journal answers only calls of a pending
            # turn), so the list is rebased up to its last tool-calling turn and that turn and
            # what follows are appended as records: results the graph adds later still answer.
            cut = _last_tool_turn(msgs)
            out.append(Entry.rebase(conversation(msgs[:cut])))
            for m in msgs[cut:]:
                out += _entries_for(m, open_calls)
        digest = _digest(ids)
        doc = json.dumps({"count": len(ids), "digest": digest}).encode()
        out.append(Entry.state(NS_MIRROR, KEY_MESSAGES, "json", doc))
        self._next = (len(ids), digest, open_calls)
        return out

    def committed(self) -> None:
        """The entries of the last ``entries`` call are durable."""
        if self._next is not None:
            self.count, self.digest, self.open_calls = self._next
            self._next = None


def _last_tool_turn(msgs: Sequence[BaseMessage]) -> int:
    """The index of the last AIMessage with tool calls (``len(msgs)`` when there is none)."""
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if isinstance(m, AIMessage) and _assistant_blocks(m)[1]:
            return i
    return len(msgs)


def _abandon(call_id: str) -> Entry:
    return Entry.tool_result(call_id, ABANDONED, is_error=True)


def _entries_for(m: BaseMessage, open_calls: list[str]) -> list[Entry]:
    if isinstance(m, ToolMessage):
        if m.tool_call_id not in open_calls:
            return []  # answers nothing the conversation holds: left to the graph state
        open_calls.remove(m.tool_call_id)
        is_error = getattr(m, "status", "success") == "error"
        return [Entry.tool_result(m.tool_call_id, _result_text(m.content), is_error=is_error)]
    if isinstance(m, HumanMessage):
        content = _text_blocks(m.content)
        if not content:
            return []
        out = [_abandon(c) for c in open_calls]
        open_calls.clear()
        return [*out, Entry.user(content)]
    if isinstance(m, AIMessage):
        out = [_abandon(c) for c in open_calls]
        open_calls.clear()
        content, calls = _assistant_blocks(m)
        usage: Mapping[str, Any] = m.usage_metadata or {}
        out.append(
            Entry.assistant(
                content,
                stop_reason="tool_use" if calls else "end_turn",
                usage={
                    "input_tokens": int(usage.get("input_tokens", 0)),
                    "output_tokens": int(usage.get("output_tokens", 0)),
                },
            )
        )
        open_calls.extend(calls)
        return out
    return []


def _assistant_blocks(m: AIMessage) -> tuple[list[Block], list[str]]:
    content = _text_blocks(m.content)
    calls: list[str] = []
    for tc in m.tool_calls:
        cid, name = tc.get("id"), tc.get("name")
        if not cid or not name or cid in calls:
            continue
        calls.append(cid)
        args = json.dumps(tc.get("args", {}), ensure_ascii=False, sort_keys=True, default=str)
        content.append({"type": "tool_use", "id": cid, "name": name, "input": args})
    return content, calls


def conversation(msgs: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The whole message list as journald messages (for an ``edit`` rebase)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[Block]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"] = [*out[-1]["content"], *blocks]
        else:
            out.append({"role": role, "content": blocks})

    for m in msgs:
        if isinstance(m, ToolMessage):
            block = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": _result_text(m.content),
                "is_error": getattr(m, "status", "success") == "error",
            }
            add("user", [block])
        elif isinstance(m, HumanMessage):
            add("user", _text_blocks(m.content))
        elif isinstance(m, AIMessage):
            add("assistant", _assistant_blocks(m)[0])
    return out
