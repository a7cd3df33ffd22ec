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

from collections.abc import Sequence
from dataclasses import dataclass

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
    report = report if report is not None else GovernanceReport()
    merged: list[Message] = []
    for m in messages:
        append_message(merged, m["role"], m["content"])
    # Cut back to a clean start: the first plain user message.
    start = next((i for i, m in enumerate(merged) if _is_clean_start(m)), len(merged))
    report.dropped_messages += start
    merged = merged[start:]
    out: list[Message] = []
    open_ids: list[str] = []  # tool_use ids of the previous assistant message
    for m in merged:
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
                continue
            if open_ids:  # the previous assistant's calls were never answered
                report.synthesized_results += len(open_ids)
                out.append({"role": "user", "content": [abandoned_result(i) for i in open_ids]})
            if merge:
                out.pop()
            out.append({**base, "content": content})
            open_ids = _tool_use_ids(out[-1])
            continue
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
        open_ids = []
        if not content:
            report.dropped_messages += 1
            continue
        if out and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": [*out[-1]["content"], *content]}
        else:
            out.append({**m, "content": content})
    if open_ids:
        report.synthesized_results += len(open_ids)
        out.append({"role": "user", "content": [abandoned_result(i) for i in open_ids]})
    return out, report
