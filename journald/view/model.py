"""What the transcript shows, as pure data: entries built from a slice of the conversation,
and the styled lines each entry takes at a width (folded or expanded).

The pairing of calls with results is ``journald.cli.replay.transcript_of`` (the same lines
``journald replay --mode transcript`` prints); this module only groups each call with its
result into one entry, marks the calls of the open turn still waiting for a result, and lays
entries out. No terminal, no daemon: the widget maps each span's role to a style.

Roles (the widget's component classes): ``label``, ``user``, ``assistant``, ``thinking``,
``call``, ``result``, ``error``, ``pending``, ``note``, ``dim``, ``more``, ``match``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald_client.state import JournalRecord, PendingTurn

from journald.cli.replay import (
    TranscriptLine,
    cell_width,
    elide_end,
    one_line,
    pending_note,
    transcript_of,
)

PENDING = -1  # the ``message`` of the open turn's entries (as in ``TranscriptLine``)
FOLDED_TEXT_LINES = 6  # a folded user/assistant text shows this many lines
FOLDED_RESULT_LINES = 3  # a folded tool result shows this many lines
KNOWN_RECORD_KINDS = frozenset({"meta", "assistant", "tool_result", "user", "rebase", "terminal"})

Span = tuple[str, str]  # (text, role)
RenderedLine = list[Span]


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing the transcript shows: a text, a call with its result, a note.

    ``key`` is stable across refreshes (message index and position in it), so the view can
    keep the reader's place and the entries the reader expanded.
    """

    key: tuple[int, int]
    kind: str  # user, assistant, thinking, call, result, note, pending, record, gap, end, marker
    text: str
    tool_name: str = ""
    tool_use_id: str = ""
    result: str | None = None  # a call's result text (None: no result yet)
    is_error: bool = False
    waiting: bool = False  # a call of the open turn without its result yet

    @property
    def foldable(self) -> bool:
        return self.kind in ("user", "assistant", "thinking", "call", "result", "note")

    def haystack(self) -> str:
        """The text a search looks in."""
        parts = [self.text, self.tool_name, self.tool_use_id, self.result or ""]
        return "\n".join(p for p in parts if p).lower()


def plural(n: int, noun: str) -> str:
    """``1 message``, ``2,000 messages``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _group(lines: Sequence[TranscriptLine], pending_calls: set[str]) -> list[Entry]:
    out: list[Entry] = []
    ordinal: dict[int, int] = {}
    i = 0
    while i < len(lines):
        tl = lines[i]
        n = ordinal.get(tl.message, 0)
        ordinal[tl.message] = n + 1
        key = (tl.message, n)
        if tl.kind == "call":
            nxt = lines[i + 1] if i + 1 < len(lines) else None
            if nxt is not None and nxt.kind == "result" and nxt.tool_use_id == tl.tool_use_id:
                out.append(
                    Entry(
                        key, "call", tl.text, tl.tool_name, tl.tool_use_id, nxt.text, nxt.is_error
                    )
                )
                i += 2
                continue
            waiting = tl.message == PENDING or tl.tool_use_id in pending_calls
            out.append(Entry(key, "call", tl.text, tl.tool_name, tl.tool_use_id, waiting=waiting))
        elif tl.kind == "result":  # an orphan result (its call is not in the slice)
            out.append(Entry(key, "result", tl.text, "", tl.tool_use_id, is_error=tl.is_error))
        else:
            out.append(Entry(key, tl.kind if tl.kind != "note" else "note", tl.text))
        i += 1
    return out


def build_entries(
    messages: Sequence[Mapping[str, Any]],
    base: int,
    pending: PendingTurn | None,
    *,
    ended: str = "",
) -> list[Entry]:
    """The entries of ``messages`` (the conversation from index ``base``), a line saying how
    many earlier messages are not loaded, then the open turn under its own heading, then
    ``ended`` (e.g. ``completed``) when the run has ended."""
    out: list[Entry] = []
    if base > 0:
        out.append(Entry((-2, 0), "gap", f"{plural(base, 'earlier message')} (scroll up, Home)"))
    unanswered = {c.id for c in pending.unanswered} if pending is not None else set()
    lines = transcript_of(messages, pending, base)
    committed = [tl for tl in lines if tl.message != PENDING]
    out.extend(_group(committed, set()))
    if pending is not None:
        out.append(Entry((PENDING, -1), "pending", pending_note(pending)))
        out.extend(_group([tl for tl in lines if tl.message == PENDING], unanswered))
    if ended:
        out.append(Entry((1 << 62, 0), "end", f"ended: {ended}"))
    return out


def record_kind_name(rec: JournalRecord) -> str:
    """The record's kind as the protocol names it, also for a kind this client cannot decode
    (its ``type`` from the canonical bytes, e.g. ``journald.v1.record.state``)."""
    if rec.kind:
        return rec.kind
    import json

    try:
        obj = json.loads(rec.canonical)
    except ValueError:
        return "unknown"
    kind = obj.get("type") if isinstance(obj, dict) else None
    return one_line(str(kind)) if kind else "unknown"


def unknown_record_entry(rec: JournalRecord, after_message: int) -> Entry | None:
    """A dim line naming a record kind the transcript does not show, or None for the kinds
    it renders through the conversation."""
    if rec.kind in KNOWN_RECORD_KINDS:
        return None
    name = record_kind_name(rec)
    return Entry((after_message, 1 << 20 | rec.seq), "record", f"{name} record at seq {rec.seq}")


# --- layout -----------------------------------------------------------------------------


def wrap(text: str, width: int) -> list[str]:
    """``text`` cut into lines of at most ``width`` cells, at a space when one is near."""
    width = max(1, width)
    out: list[str] = []
    for para in text.split("\n"):
        line, used = "", 0
        for ch in para:
            w = cell_width(ch)
            if used + w > width:
                cut = line.rfind(" ")
                if cut > width // 2:
                    out.append(line[:cut])
                    line = line[cut + 1 :]
                    used = cell_width(line)
                else:
                    out.append(line)
                    line, used = "", 0
            line += ch
            used += w
        out.append(line)
    return out


_LABELS = {"user": "user", "assistant": "assistant", "thinking": "thinking"}
_INDENT = "  "


def _block(
    head: RenderedLine, body: list[str], role: str, width: int, keep: int | None
) -> list[RenderedLine]:
    """``head`` then ``body`` lines in ``role``, cut to ``keep`` lines with a count."""
    out = [head] if head else []
    shown = body if keep is None or len(body) <= keep + 1 else body[:keep]
    out.extend([(_INDENT + ln, role)] for ln in shown)
    if len(body) > len(shown):
        out.append([(_INDENT + _more(len(body) - len(shown)), "more")])
    return out


def _more(hidden: int) -> str:
    return f"… {hidden} more line{'s' if hidden > 1 else ''} (enter shows all)"


def render_entry(entry: Entry, width: int, expanded: bool) -> list[RenderedLine]:
    """The lines ``entry`` takes at ``width`` cells (every line fits)."""
    width = max(20, width)
    inner = width - cell_width(_INDENT)
    k = entry.kind
    if k in _LABELS:
        keep = None if expanded else (1 if k == "thinking" else FOLDED_TEXT_LINES)
        return _block([(_LABELS[k], "label")], wrap(entry.text, inner), k, width, keep)
    if k == "call":
        head_text = f"→ {entry.tool_name}"
        args = entry.text
        if expanded:
            head = [(head_text, "call"), (f"  [{entry.tool_use_id}]", "dim")]
            lines = [head] + [[(_INDENT + ln, "call")] for ln in wrap(args, inner)]
        else:
            room = width - cell_width(head_text) - 1
            shown = " " + elide_end(args, room) if args and room > 8 else ""
            lines = [[(elide_end(head_text + shown, width), "call")]]
        if entry.result is not None:
            role = "error" if entry.is_error else "result"
            mark = "✗ error" if entry.is_error else "←"
            pad = _INDENT + " " * (cell_width(mark) + 1)
            body = wrap(entry.result or "(empty)", width - cell_width(pad))
            keep = len(body)
            if not expanded and len(body) > FOLDED_RESULT_LINES + 1:
                keep = FOLDED_RESULT_LINES
            for j, ln in enumerate(body[:keep]):
                lines.append([(f"{_INDENT}{mark} " if j == 0 else pad, role), (ln, role)])
            if len(body) > keep:
                lines.append([(f"{pad}{_more(len(body) - keep)}", "more")])
        elif entry.waiting:
            lines.append([(f"{_INDENT}○ waiting for its result", "pending")])
        return [_fit(ln, width) for ln in lines]
    if k == "result":
        role = "error" if entry.is_error else "result"
        head = [(f"← [{entry.tool_use_id}]" + (" error" if entry.is_error else ""), role)]
        return _block(head, wrap(entry.text, inner), role, width, None if expanded else 3)
    if k == "pending":
        text = f"── {entry.text} "
        return [[(elide_end(text + "─" * max(0, width - cell_width(text)), width), "pending")]]
    if k in ("end", "marker"):
        text = f"── {entry.text} "
        return [[(elide_end(text + "─" * max(2, width - cell_width(text)), width), "note")]]
    if k in ("record", "gap"):
        return [[(elide_end(("· " if k == "record" else "↑ ") + entry.text, width), "dim")]]
    return _block(
        [], wrap(entry.text, inner), "note", width, None if expanded else FOLDED_TEXT_LINES
    )


def _fit(line: RenderedLine, width: int) -> RenderedLine:
    out: RenderedLine = []
    used = 0
    for text, role in line:
        room = width - used
        if room <= 0:
            break
        piece = text if cell_width(text) <= room else elide_end(text, room)
        out.append((piece, role))
        used += cell_width(piece)
    return out


def find(entries: Sequence[Entry], query: str, start: int, step: int) -> int | None:
    """The index of the next entry from ``start`` (exclusive) in direction ``step`` (+1 or
    -1) whose text holds ``query`` (case-insensitive), or None."""
    q = query.lower()
    if not q:
        return None
    i = start + step
    while 0 <= i < len(entries):
        if q in entries[i].haystack():
            return i
        i += step
    return None


def merge_notes(entries: list[Entry], notes: list[Entry]) -> list[Entry]:
    """Put each note after the last entry of the message it arrived after."""
    out: list[Entry] = []
    pending_notes = sorted(notes, key=lambda n: n.key)
    for e in entries:
        while pending_notes and e.key[0] >= 0 and pending_notes[0].key[0] <= e.key[0]:
            out.append(pending_notes.pop(0))
        out.append(e)
    end = [e for e in out if e.kind == "end"]
    body = [e for e in out if e.kind != "end"]
    return body + pending_notes + end
