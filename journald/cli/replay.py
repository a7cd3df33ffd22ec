"""Replay: three renderings of one folded state (docs/design.md#operations).

* ``narrate`` — the resume narration: what the model said and which tools it called, tool
  output hidden (what an operator watches scroll by when a run resumes);
* ``dump`` — a plain dump of every message for inspection, tool results as ``<- [id]`` lines
  (``show_output=False`` keeps the lines but hides the result text);
* ``transcript`` — structured lines that pair each tool call with its result by tool-use id
  across the whole conversation, so calls and results interleave as they happened; an
  unanswered call of the pending turn simply has no result. This is the model a full-screen
  viewer renders; ``render_transcript`` is its plain-text form.

The pending turn lives outside the committed conversation (``state.messages``), so every walk
handles it explicitly after the committed messages.

Everything here is a pure function of the folded state (``journald_client.RunState``, what
the daemon's ``Fold`` returns) and a width: no I/O, no terminal, no daemon. Text coming from
the journal is untrusted: terminal escape sequences and other control characters are
stripped (``clean``) before anything is shown, and long tool arguments are elided in the
middle (``elide_middle``) so a line fits the width.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald_client.state import PendingTurn, RunState

Block = Mapping[str, Any]
ELLIPSIS = "…"
DEFAULT_WIDTH = 100
MIN_WIDTH = 20

# --- untrusted text --------------------------------------------------------------------

_ESCAPES = re.compile(
    r"""
      \x1b\[[0-?]*[\x20-/]*[@-~]                 # CSI: colours, cursor moves, erases
    | \x9b[0-?]*[\x20-/]*[@-~]                   # 8-bit CSI
    | \x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?  # OSC: titles, hyperlinks, clipboard
    | \x9d[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?    # 8-bit OSC
    | \x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?     # DCS, SOS, PM, APC strings
    | [\x90\x98\x9e\x9f][^\x1b\x9c]*(?:\x1b\\|\x9c)?  # their 8-bit forms
    | \x1b[\x20-/]*[0-~]                         # any other escape sequence
    | \x1b                                       # a lone ESC
    """,
    re.VERBOSE,
)
# C0 (except tab and newline), DEL, C1, and the Unicode bidi overrides/isolates that can
# make a line read differently from what it holds.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SPACES = re.compile(r"\s+")


def clean(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (tabs become spaces;
    a carriage return keeps what a terminal would show: the text after the last one)."""
    text = _ESCAPES.sub("", text)
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p]
            line = parts[-1] if parts else ""
        lines.append(_CONTROLS.sub("", line).expandtabs(4))
    return "\n".join(lines)


def one_line(text: str) -> str:
    """Cleaned text on one line (runs of whitespace, newlines included, become one space)."""
    return _SPACES.sub(" ", clean(text)).strip()


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cell_width(text: str) -> int:
    """Terminal cells ``text`` takes (wide East Asian characters count 2, combining 0)."""
    return sum(_char_width(c) for c in text)


def elide_middle(text: str, width: int) -> str:
    """``text`` if it fits in ``width`` cells, else its head and tail around ``…``."""
    if cell_width(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS if width == 1 else ""
    budget = width - 1
    head_budget = budget - budget // 2
    tail_budget = budget // 2
    head, used = [], 0
    for ch in text:
        w = _char_width(ch)
        if used + w > head_budget:
            break
        head.append(ch)
        used += w
    tail, used = [], 0
    for ch in reversed(text):
        w = _char_width(ch)
        if used + w > tail_budget:
            break
        tail.append(ch)
        used += w
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


def elide_end(text: str, width: int) -> str:
    """``text`` cut at ``width`` cells with a trailing ``…`` when it does not fit."""
    if cell_width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = _char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


# --- blocks ----------------------------------------------------------------------------


def _text_of_blocks(blocks: Iterable[Block]) -> str:
    """The readable text of result content blocks (non-text blocks as short placeholders)."""
    parts = []
    for b in blocks:
        t = b.get("type")
        if t == "text":
            parts.append(clean(str(b.get("text", ""))))
        elif t == "attachment":
            name = b.get("name") or str(b.get("sha256", ""))[:12]
            parts.append(f"[attachment {clean(str(name))} {b.get('media_type', '')}]")
        else:
            parts.append(f"[{clean(str(t))} block]")
    return "\n".join(parts)


def result_text(block: Block) -> str:
    """The text of one tool_result block's content."""
    content = block.get("content", [])
    if isinstance(content, str):  # tolerated: some providers allow a bare string
        return clean(content)
    return _text_of_blocks(content if isinstance(content, list) else [])


def call_args(block: Block) -> str:
    """A tool_use block's input on one line (compact JSON text as the model produced it)."""
    raw = block.get("input", "")
    return one_line(raw if isinstance(raw, str) else str(raw))


def _call_line(prefix: str, name: str, args: str, width: int, suffix: str = "") -> str:
    """``prefix name args suffix`` with the arguments elided in the middle to fit."""
    head = f"{prefix}{name}"
    room = width - cell_width(head) - cell_width(suffix) - 1
    if not args:
        return head + suffix
    if room < 8:  # too narrow for useful arguments: show the name alone
        return elide_end(head + suffix, width)
    return f"{head} {elide_middle(args, room)}{suffix}"


def _indent(text: str, first: str, rest: str | None = None, width: int = 0) -> list[str]:
    """``text`` under ``first`` with the later lines under ``rest`` (default: as many spaces);
    with ``width``, long lines are cut at a space near the edge and go on under ``rest``, so
    a terminal never wraps them back to column 0."""
    lines = text.split("\n") if text else [""]
    pad = rest if rest is not None else " " * cell_width(first)
    if width > 0:
        room = max(10, width - cell_width(pad))
        lines = [piece for ln in lines for piece in _cut(ln, room)]
    return [first + lines[0]] + [pad + ln for ln in lines[1:]]


def _cut(line: str, room: int) -> list[str]:
    """``line`` in pieces of at most ``room`` cells, cut at the last space when one is in
    the second half of the piece."""
    out: list[str] = []
    while cell_width(line) > room:
        used, end = 0, 0
        for end, ch in enumerate(line):  # noqa: B007 (end is used after the loop)
            used += cell_width(ch)
            if used > room:
                break
        space = line.rfind(" ", 0, end)
        cut = space if space > end // 2 else end
        out.append(line[:cut].rstrip())
        line = line[cut:].lstrip(" ") if space > end // 2 else line[cut:]
    out.append(line)
    return out


# --- rendered lines --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """One output line and its kind (the CLI styles kinds on a terminal)."""

    kind: str  # header, user, assistant, thinking, call, result, error, pending, note
    text: str


def plain(lines: Iterable[Line]) -> str:
    """The lines as plain text (one per line, trailing newline)."""
    out = "\n".join(line.text for line in lines)
    return out + "\n" if out else ""


def _width(width: int) -> int:
    return max(MIN_WIDTH, width)


def pending_note(p: PendingTurn) -> str:
    """One sentence on the open turn: its iteration, seq, stop reason and answered calls."""
    calls = p.calls
    answered = len(calls) - len(p.unanswered)
    return (
        f"pending turn (iteration {p.iteration}, seq {p.seq}, stop {p.stop_reason or '-'}): "
        f"{answered} of {len(calls)} tool calls answered"
    )


def _end_lines(state: RunState) -> list[Line]:
    if state.terminal is not None and state.terminal_is_last:
        msg = one_line(state.terminal.message)
        return [Line("note", f"-- ended: {state.terminal.reason}" + (f": {msg}" if msg else ""))]
    return []


# --- narrate ---------------------------------------------------------------------------


def _narrate_message(
    out: list[Line], m: Mapping[str, Any], width: int, unanswered: set[str] | None = None
) -> None:
    role = m.get("role")
    for b in m.get("content", []):
        t = b.get("type")
        if t == "text" and role == "user":
            out.extend(Line("user", s) for s in _indent(clean(str(b.get("text", ""))), "> "))
        elif t == "text":
            out.extend(Line("assistant", s) for s in clean(str(b.get("text", ""))).split("\n"))
        elif t == "tool_use":
            suffix = "  [not answered yet]" if unanswered and b.get("id") in unanswered else ""
            name = one_line(str(b.get("name", "?")))
            out.append(Line("call", _call_line("  -> ", name, call_args(b), width, suffix)))
        # thinking, tool results and provider blocks are not narrated


def narrate(state: RunState, width: int = DEFAULT_WIDTH) -> list[Line]:
    """The resume narration: user prompts, assistant text, tool calls; no tool output."""
    width = _width(width)
    out: list[Line] = []
    for m in state.messages:
        _narrate_message(out, m, width)
    p = state.pending
    if p is not None:
        out.append(Line("pending", f"-- {pending_note(p)} --"))
        _narrate_message(out, p.message, width, {c.id for c in p.unanswered})
    out.extend(_end_lines(state))
    return out


# --- dump ------------------------------------------------------------------------------


def _dump_block(out: list[Line], b: Block, width: int, show_output: bool) -> None:
    t = b.get("type")
    if t == "text":
        out.extend(
            Line("text", s) for s in _indent(clean(str(b.get("text", ""))), "  ", width=width)
        )
    elif t == "thinking":
        thinking = clean(str(b.get("thinking", "")))
        out.extend(Line("thinking", s) for s in _indent(thinking, "  (thinking) ", "  ", width))
    elif t == "redacted_thinking":
        out.append(Line("thinking", "  (redacted thinking)"))
    elif t == "tool_use":
        name = one_line(str(b.get("name", "?")))
        prefix = f"  -> [{one_line(str(b.get('id', '')))}] "
        out.append(Line("call", _call_line(prefix, name, call_args(b), width)))
    elif t == "tool_result":
        tid = one_line(str(b.get("tool_use_id", "")))
        err = bool(b.get("is_error"))
        kind = "error" if err else "result"
        first = f"  <- [{tid}] " + ("error: " if err else "")
        if show_output:
            out.extend(Line(kind, s) for s in _indent(result_text(b), first, width=width))
        else:
            out.append(Line(kind, first.rstrip() if not err else f"  <- [{tid}] error"))
    elif t == "provider":
        out.append(Line("note", f"  [provider block: {one_line(str(b.get('provider', '')))}]"))
    elif t == "attachment":
        out.append(Line("note", "  " + _text_of_blocks([b])))
    else:
        out.append(Line("note", f"  [{one_line(str(t))} block]"))


def dump(state: RunState, width: int = DEFAULT_WIDTH, show_output: bool = True) -> list[Line]:
    """Every committed message, then the pending turn: ``#n role`` headers, ``-> [id]`` calls,
    ``<- [id]`` results (text hidden when ``show_output`` is false)."""
    width = _width(width)
    out: list[Line] = []
    for i, m in enumerate(state.messages, 1):
        out.append(Line("header", f"#{i} {one_line(str(m.get('role', '?')))}"))
        for b in m.get("content", []):
            _dump_block(out, b, width, show_output)
    p = state.pending
    if p is not None:
        out.append(Line("pending", pending_note(p)))
        out.append(Line("header", "#pending assistant"))
        for b in p.message.get("content", []):
            _dump_block(out, b, width, show_output)
        for r in p.results:
            block = {
                "type": "tool_result",
                "tool_use_id": r.tool_use_id,
                "content": r.content,
                "is_error": r.is_error,
            }
            _dump_block(out, block, width, show_output)
        for c in p.unanswered:
            out.append(Line("pending", f"  (no result yet for [{one_line(c.id)}])"))
    out.extend(_end_lines(state))
    return out


# --- transcript ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    """One line of the transcript model a viewer renders.

    ``kind``: user, assistant, thinking, call, result, note. A ``call`` is followed by its
    ``result`` (same ``tool_use_id``) when one exists anywhere in the run. ``message`` is the
    index in ``state.messages``, or -1 for the pending turn. ``text`` is cleaned but not
    elided: a viewer decides how much of it to show.
    """

    kind: str
    text: str
    message: int
    tool_use_id: str = ""
    tool_name: str = ""
    is_error: bool = False


def _results_by_id(
    messages: Sequence[Mapping[str, Any]], pending: PendingTurn | None
) -> dict[str, tuple[str, bool]]:
    found: dict[str, tuple[str, bool]] = {}
    for m in messages:
        for b in m.get("content", []):
            if b.get("type") == "tool_result":
                tid = str(b.get("tool_use_id", ""))
                found.setdefault(tid, (result_text(b), bool(b.get("is_error"))))
    if pending is not None:
        for r in pending.results:
            found.setdefault(r.tool_use_id, (_text_of_blocks(r.content), r.is_error))
    return found


def _called_ids(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    return {
        str(b.get("id", ""))
        for m in messages
        for b in m.get("content", [])
        if b.get("type") == "tool_use"
    }


def _transcript_message(
    out: list[TranscriptLine],
    m: Mapping[str, Any],
    index: int,
    results: Mapping[str, tuple[str, bool]],
    called: set[str],
) -> None:
    role = str(m.get("role", ""))
    for b in m.get("content", []):
        t = b.get("type")
        if t == "text":
            out.append(TranscriptLine(role or "note", clean(str(b.get("text", ""))), index))
        elif t == "thinking":
            out.append(TranscriptLine("thinking", clean(str(b.get("thinking", ""))), index))
        elif t == "tool_use":
            tid, name = str(b.get("id", "")), one_line(str(b.get("name", "?")))
            out.append(TranscriptLine("call", call_args(b), index, tid, name))
            if tid in results:
                text, err = results[tid]
                out.append(TranscriptLine("result", text, index, tid, name, err))
        elif t == "tool_result":
            tid = str(b.get("tool_use_id", ""))
            if tid not in called:  # an orphan (e.g. after a rebase): show it where it is
                out.append(
                    TranscriptLine(
                        "result", result_text(b), index, tid, "", bool(b.get("is_error"))
                    )
                )
        elif t == "redacted_thinking":
            out.append(TranscriptLine("thinking", "(redacted thinking)", index))
        elif t == "provider":
            provider = one_line(str(b.get("provider", "")))
            out.append(TranscriptLine("note", f"[provider block: {provider}]", index))
        else:
            out.append(TranscriptLine("note", _text_of_blocks([b]), index))


def transcript(state: RunState) -> list[TranscriptLine]:
    """Calls paired with their results by tool-use id across the whole run, in order."""
    return transcript_of(state.messages, state.pending)


def transcript_of(
    messages: Sequence[Mapping[str, Any]], pending: PendingTurn | None = None, base: int = 0
) -> list[TranscriptLine]:
    """``transcript`` of a slice of the conversation: ``messages`` are the conversation's
    messages from index ``base`` on (a self-paired History page pairs completely), then the
    pending turn if given. Line ``message`` indexes count from ``base``."""
    results = _results_by_id(messages, pending)
    called = _called_ids([*messages, pending.message] if pending is not None else messages)
    out: list[TranscriptLine] = []
    for i, m in enumerate(messages):
        _transcript_message(out, m, base + i, results, called)
    if pending is not None:
        _transcript_message(out, pending.message, -1, results, called)
    return out


_LABEL = {
    "user": "user",
    "assistant": "assistant",
    "thinking": "thinking",
    "call": "call",
    "result": "result",
    "note": "note",
}


def render_transcript(
    lines: Sequence[TranscriptLine], state: RunState, width: int = DEFAULT_WIDTH
) -> list[Line]:
    """The transcript as text: one line per entry (first line of multi-line text, with a
    ``(+N lines)`` count), the pending turn under its own heading."""
    width = _width(width)
    out: list[Line] = []
    in_pending = False
    for tl in lines:
        if tl.message == -1 and not in_pending and state.pending is not None:
            in_pending = True
            out.append(Line("pending", f"-- {pending_note(state.pending)} --"))
        label = f"{_LABEL.get(tl.kind, tl.kind):<9} "
        if tl.kind == "call":
            out.append(
                Line(
                    "call", _call_line(f"{label}[{tl.tool_use_id}] ", tl.tool_name, tl.text, width)
                )
            )
            continue
        text_lines = tl.text.split("\n") if tl.text else [""]
        more = len(text_lines) - 1
        suffix = f" (+{more} line{'s' if more > 1 else ''})" if more else ""
        if tl.kind == "result":
            head = f"{label}[{tl.tool_use_id}] " + ("error: " if tl.is_error else "")
            kind = "error" if tl.is_error else "result"
        else:
            head, kind = label, tl.kind
        room = width - cell_width(head) - cell_width(suffix)
        out.append(Line(kind, head + elide_end(text_lines[0], max(room, 1)) + suffix))
    if state.pending is not None and not in_pending:
        out.append(Line("pending", f"-- {pending_note(state.pending)} --"))
    out.extend(_end_lines(state))
    return out


MODES = ("narrate", "dump", "transcript")


def render(
    state: RunState, mode: str, width: int = DEFAULT_WIDTH, show_output: bool = True
) -> list[Line]:
    """One of the three renderings by name."""
    if mode == "narrate":
        return narrate(state, width)
    if mode == "dump":
        return dump(state, width, show_output)
    if mode == "transcript":
        return render_transcript(transcript(state), state, width)
    raise ValueError(f"unknown replay mode {mode!r}; use one of {', '.join(MODES)}")
