"""Pairing governance: the history handed to a model after an interruption
(docs/design.md#pairing-governance).

``governed_messages(state)`` returns the folded messages plus the pending turn, repaired so
the list can be sent without a 400:

1. the pending assistant turn is committed with its journaled results, and every unanswered
   tool_use gets a synthetic error result (``is_error``, a fixed explanatory text);
2. ``sanitize`` then walks the list: consecutive same-role messages merge; a tool_result that
   does not answer a tool_use of the message just before it is an orphan and is dropped
   (an answered id is answered once); a repeated tool_use id within one assistant turn is
   dropped, and so is a block in the wrong role's message (a tool_result from the assistant,
   a tool_use from the user); a message left empty is dropped; leading messages that are not
   a plain, non-empty user turn are cut back to the first clean boundary; any tool_use still
   unanswered gets a synthetic error result.

The report says how many results were synthesized and how many messages/blocks dropped.
Writers that resume should close open calls for real instead (run them, or append an
explicit error result); this view is for reading and for one-off sends.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.fold import (
    Message,
    RunState,
    abandoned_result,
    append_message,
    pending_blocks,
)


@dataclass(slots=True)
class GovernanceReport:
    synthesized_results: int = 0
    dropped_messages: int = 0
    dropped_blocks: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.synthesized_results or self.dropped_messages or self.dropped_blocks)


def governed_messages(state: RunState) -> tuple[list[Message], GovernanceReport]:
    report = GovernanceReport()
    msgs = list(state.messages)
    if state.pending is not None:
        report.synthesized_results += len(state.pending.unanswered)
        append_message(msgs, "assistant", state.pending.message["content"])
        append_message(msgs, "user", pending_blocks(state.pending))
    return sanitize(msgs, report)


def _tool_use_ids(msg: Message) -> list[str]:
    return [str(b.get("id")) for b in msg["content"] if b.get("type") == "tool_use"]


def _is_clean_start(msg: Message) -> bool:
    types = [b.get("type") for b in msg["content"]]
    return (
        msg["role"] == "user" and "tool_result" not in types and any(t != "tool_use" for t in types)
    )


def sanitize(
    messages: Sequence[Message], report: GovernanceReport | None = None
) -> tuple[list[Message], GovernanceReport]:
    """Repair any message list into an alternating, fully paired one (see module doc)."""
    s = Sanitizer(report)
    for m in messages:
        s.feed(m)
    return s.finish(), s.report


def _same(m: Any) -> Any:
    return m


class Sanitizer:
    """``sanitize`` one message at a time: what it carries between messages is small (the
    merged message that may still grow, whether the clean start was seen, the last output
    and the calls it left open), so a conversation stored as pages is sanitized page by page
    (``journald.core.view_index``). ``done`` collects the outputs that can no longer change;
    ``finish`` ends the list. ``to_json``/``from_json`` carry the state between pages."""

    __slots__ = ("done", "held", "open_ids", "out", "report", "started")

    def __init__(self, report: GovernanceReport | None = None) -> None:
        self.report = report if report is not None else GovernanceReport()
        self.held: Message | None = None  # the merged message the next may merge into
        self.started = False  # the first plain user message was seen
        self.out: list[Message] = []  # the last output (the next message may change it)
        self.open_ids: list[str] = []  # tool_use ids of the previous assistant message
        self.done: list[Message] = []  # outputs before ``out``: final

    def copy(self) -> Sanitizer:
        """An independent carry (messages are never changed in place, lists are copied)."""
        c = Sanitizer(GovernanceReport())
        c.held, c.started, c.out = self.held, self.started, list(self.out)
        c.open_ids, c.done = list(self.open_ids), list(self.done)
        return c

    def to_json(self, name: Callable[[Message], Any] = _same) -> dict[str, Any]:
        """The carry as JSON; ``name`` writes each message (a stand-in the reader's
        ``from_json`` resolves, or the message itself)."""
        return {
            "held": None if self.held is None else name(self.held),
            "started": self.started,
            "out": [name(m) for m in self.out],
            "open_ids": self.open_ids,
            "done": [name(m) for m in self.done],
        }

    @classmethod
    def from_json(cls, obj: Any, resolve: Callable[[Any], Any] = _same) -> Sanitizer:
        """The carry ``to_json`` wrote (``resolve``: each message's stand-in back);
        ``ValueError`` for anything else."""
        if not isinstance(obj, dict) or set(obj) != {"held", "started", "out", "open_ids", "done"}:
            raise ValueError("not a sanitizer carry")
        s = cls()
        held, out, done, ids = obj["held"], obj["out"], obj["done"], obj["open_ids"]
        if not isinstance(out, list) or len(out) > 1 or not isinstance(done, list):
            raise ValueError("its outputs are not lists")
        held = None if held is None else resolve(held)
        out, done = [resolve(m) for m in out], [resolve(m) for m in done]
        if held is not None and not _is_message(held):
            raise ValueError("its held message is malformed")
        if not all(_is_message(m) for m in [*out, *done]):
            raise ValueError("its outputs are malformed")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("its open calls are malformed")
        if type(obj["started"]) is not bool:
            raise ValueError("its start flag is not a boolean")
        s.held, s.started, s.out, s.open_ids, s.done = held, obj["started"], out, ids, done
        return s

    def messages(self) -> list[Message]:
        """Every message the carry holds, in order (final outputs, the last, the held one)."""
        return [*self.done, *self.out, *([self.held] if self.held is not None else [])]

    def feed(self, m: Message) -> None:
        """The next message (``append_message`` merging of consecutive same-role ones)."""
        role, content = m["role"], m["content"]
        held = self.held
        if held is not None and held["role"] == role:
            self.held = {**held, "content": [*held["content"], *content]}
            return
        if held is not None:
            self._merged(held)
        self.held = {"role": role, "content": list(content)}

    def finish(self) -> list[Message]:
        """Every output (``done`` with the rest), the list ended: this carry is spent."""
        if self.held is not None:
            self._merged(self.held)
            self.held = None
        if self.open_ids:
            self.report.synthesized_results += len(self.open_ids)
            synthetic = [abandoned_result(i) for i in self.open_ids]
            self.out.append({"role": "user", "content": synthetic})
            self.open_ids = []
        self.done.extend(self.out)
        self.out = []
        return self.done

    def _merged(self, m: Message) -> None:
        # leading messages that are not a plain, non-empty user turn are cut
        if not self.started:
            if not _is_clean_start(m):
                self.report.dropped_messages += 1
                return
            self.started = True
        self._step(m)
        if len(self.out) > 1:  # only the last output can still change
            self.done.extend(self.out[:-1])
            del self.out[:-1]

    def _step(self, m: Message) -> None:
        report, out, open_ids = self.report, self.out, self.open_ids
        if m["role"] == "assistant":
            # two assistant messages in a row are one turn (unless calls between them are open)
            merge = not open_ids and bool(out) and out[-1]["role"] == "assistant"
            base = out[-1] if merge else m
            combined = [*base["content"], *m["content"]] if merge else m["content"]
            content, seen = [], set()
            for b in combined:  # a tool_use id may appear once per turn
                if b.get("type") == "tool_result":  # misplaced: results belong to users
                    report.dropped_blocks += 1
                    continue
                if b.get("type") == "tool_use":
                    if b.get("id") in seen:
                        report.dropped_blocks += 1
                        continue
                    seen.add(b.get("id"))
                content.append(b)
            if not content:
                # empty, or nothing but misplaced blocks: model APIs refuse an empty assistant
                # message; the calls still open wait for the next message to answer them
                report.dropped_messages += 1
                return
            if open_ids:  # the previous assistant's calls were never answered
                report.synthesized_results += len(open_ids)
                out.append({"role": "user", "content": [abandoned_result(i) for i in open_ids]})
            if merge:
                out.pop()
            out.append({**base, "content": content})
            self.open_ids = _tool_use_ids(out[-1])
            return
        kept, answered = [], set()
        for b in m["content"]:
            if b.get("type") == "tool_use":  # misplaced: only an assistant calls tools
                report.dropped_blocks += 1
                continue
            if b.get("type") == "tool_result":
                tid = b.get("tool_use_id")
                if tid not in open_ids or tid in answered:
                    report.dropped_blocks += 1
                    continue
                answered.add(tid)
            kept.append(b)
        missing = [i for i in open_ids if i not in answered]
        report.synthesized_results += len(missing)
        content = [abandoned_result(i) for i in missing] + kept
        # Results must lead the user message that answers a tool_use turn.
        content.sort(key=lambda b: b.get("type") != "tool_result")
        self.open_ids = []
        if not content:
            report.dropped_messages += 1
            return
        if out and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": [*out[-1]["content"], *content]}
        else:
            out.append({**m, "content": content})


def _is_message(m: Any) -> bool:
    if not isinstance(m, dict):
        return False
    return isinstance(m.get("role"), str) and isinstance(m.get("content"), list)
