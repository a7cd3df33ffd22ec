"""The records screen of one run: its journal as stored, a page of records at a time, with a
timeline (each record's time, the time since the one before, how long a tool call waited for
its result, the tokens of each model turn), the operations that rewrote the conversation
marked, and the raw record under the cursor (seq, hash, trace id, the stored JSON); ``y``
copies that JSON.

Pages are read by seq with Load (a stream closed after one page), so the first and the last
page of any run cost the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from journald_client import JournalRecord
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Footer, Input, Static

from journald.cli.commands import record_summary
from journald.cli.replay import elide_end, one_line
from journald.view.base import Box, DaemonScreen
from journald.view.data import RecordPage
from journald.view.runs import ago, zone_name

MARKED_KINDS = {  # what rewrote or framed the conversation, and how it shows
    "meta": "bold cyan",
    "rebase": "bold magenta",
    "terminal": "bold yellow",
}
COLUMNS = (("seq", "SEQ"), ("time", "TIME"), ("delta", "+Δ"), ("kind", "KIND"), ("what", "WHAT"))


def _when(ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def seconds(a: str, b: str) -> float | None:
    """Seconds from timestamp ``a`` to ``b`` (None if either does not parse)."""
    ta, tb = _when(a), _when(b)
    return (tb - ta).total_seconds() if ta is not None and tb is not None else None


def duration(s: float | None) -> str:
    if s is None:
        return ""
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 120:
        return f"{s:.1f}s"
    return f"{s / 60:.1f}m"


def timeline(
    records: Sequence[JournalRecord], before: Sequence[JournalRecord] = ()
) -> list[tuple[str, str, str]]:
    """Per record: (local time, time since the record before, what the timeline adds: the
    wait of a tool result for its call, the tokens of a model turn). ``before``: the records
    just before, read for the calls and the first time step only."""
    out: list[tuple[str, str, str]] = []
    calls: dict[str, str] = {}  # tool_use id -> ts of the assistant record that made it
    prev = ""
    for rec in [*before, *records]:
        when = _when(rec.ts)
        local = when.astimezone().strftime("%H:%M:%S.%f")[:-3] if when else rec.ts
        delta = f"+{duration(seconds(prev, rec.ts))}" if prev else ""
        prev = rec.ts
        extra = ""
        p = rec.payload
        if rec.kind == "assistant":
            for b in (p.get("message") or {}).get("content", []):
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    calls[str(b.get("id", ""))] = rec.ts
            u = p.get("usage") or {}
            if u:
                extra = f"tokens in {u.get('input_tokens', 0)} out {u.get('output_tokens', 0)}"
        elif rec.kind == "tool_result":
            made = calls.get(str(p.get("tool_use_id", "")))
            if made is not None:
                extra = f"result after {duration(seconds(made, rec.ts))}"
        out.append((local, delta, extra))
    return out[len(before) :]


def raw_text(rec: JournalRecord, now_s: float | None = None) -> Text:
    """The record as stored, with the facts a reader checks first (its time also local, with
    the zone, and how long ago when ``now_s`` is given)."""
    trace = ", ".join(f"{k}={v}" for k, v in (rec.trace or {}).items()) or "none"
    when = _when(rec.ts)
    local = ""
    if when is not None:
        local = f" ({when.astimezone().strftime('%Y-%m-%d %H:%M:%S')} {zone_name()}"
        local += f", {ago(rec.ts, now_s)})" if now_s is not None else ")"
    out = Text()
    out.append(f"seq {rec.seq} · {rec.kind or 'unknown kind'} · {rec.ts}{local}\n", style="bold")
    out.append(f"hash {rec.hash}\nprev {rec.prev}\ntrace {trace}\n", style="dim")
    try:
        pretty = json.dumps(json.loads(rec.canonical), indent=2, ensure_ascii=False)
    except ValueError:
        pretty = rec.canonical.decode("utf-8", "replace")
    out.append(pretty)
    return out


class RecordsScreen(DaemonScreen):
    """The journal of one run, a page of records at a time; opens on the last page."""

    DEFAULT_CSS = """
    RecordsScreen #head { height: 1; padding: 0 1; background: $panel; }
    RecordsScreen DataTable { height: 2fr; }
    RecordsScreen #raw-box { height: 1fr; border-top: solid $primary; }
    RecordsScreen #raw { padding: 0 1; }
    RecordsScreen Box { dock: bottom; height: 3; display: none; }
    RecordsScreen Box.shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("y", "copy", "Copy record"),
        Binding("colon", "goto", "Go to seq"),
        # priority: the table's own keys would scroll within the page instead
        Binding("home,g", "first", "First page", priority=True),
        Binding("end,G", "last", "Last page", priority=True),
        Binding("pageup", "earlier", "Earlier page", show=False, priority=True),
        Binding("pagedown", "later", "Later page", show=False, priority=True),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.records: list[JournalRecord] = []
        self.before: list[JournalRecord] = []
        self.last_seq = 0
        self.copied = ""  # what y copied last (tests read it)

    def compose(self) -> ComposeResult:
        yield Static(Text(f"records of run {self.run_id} · loading…"), id="head")
        table: DataTable[Text] = DataTable(cursor_type="row", id="records")
        for key, title in COLUMNS:
            table.add_column(title, key=key)
        yield table
        with VerticalScroll(id="raw-box"):
            yield Static("", id="raw")
        yield Box(placeholder="go to seq N (escape: close)", id="seq")
        yield Footer()

    @property
    def table(self) -> DataTable[Text]:
        return self.query_one(DataTable)

    def on_mount(self) -> None:
        self.table.focus()
        self.action_last()

    def reconnected(self) -> None:
        self.action_last()

    def _read(self, from_seq: int | None, cursor_last: bool) -> None:
        def call() -> RecordPage:
            return self.source.records(self.run_id, from_seq)

        def done(got: RecordPage) -> None:
            self.records, self.before, self.last_seq = got.records, got.before, got.last_seq
            self._show(cursor_last)

        self.fetch(call, done, group="records", exclusive=True)

    def _show(self, cursor_last: bool) -> None:
        table = self.table
        table.clear()
        width = max(20, self.size.width - 50)  # what the other four columns and padding leave
        steps = timeline(self.records, self.before)
        for rec, (local, delta, extra) in zip(self.records, steps, strict=True):
            style = MARKED_KINDS.get(rec.kind, "")
            parts = record_summary(rec, 10_000).split(None, 4)  # seq, date, time, kind, what
            what = parts[4] if len(parts) == 5 else ""
            what = f"{extra} · {what}" if extra else what
            table.add_row(
                Text(f"{rec.seq:>6}"),
                Text(local),
                Text(f"{delta:>7}"),
                Text(rec.kind or "?", style=style),
                Text(elide_end(one_line(what), width), style=style),
                key=str(rec.seq),
            )
        if self.records:
            table.move_cursor(row=len(self.records) - 1 if cursor_last else 0, animate=False)
            first, last = self.records[0].seq, self.records[-1].seq
            where = f"seq {first:,}-{last:,} of {self.last_seq:,}"
        else:
            where = "no records"
        newest = ""
        if self.records:
            newest = f" · last record {ago(self.records[-1].ts, self.viewer.clock())}"
        self.query_one("#head", Static).update(
            Text(f"records of run {one_line(self.run_id)} · {where}{newest} · times {zone_name()}")
        )
        self._show_raw()

    def _show_raw(self) -> None:
        rec = self.selected()
        now = self.viewer.clock()
        self.query_one("#raw", Static).update(raw_text(rec, now) if rec is not None else "")

    def selected(self) -> JournalRecord | None:
        row = self.table.cursor_row
        return self.records[row] if 0 <= row < len(self.records) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_raw()

    # --- actions ---------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_first(self) -> None:
        self._read(1, cursor_last=False)

    def action_last(self) -> None:
        self._read(None, cursor_last=True)

    def action_earlier(self) -> None:
        if self.records and self.records[0].seq > 1:
            self._read(max(1, self.records[0].seq - self.source.page), cursor_last=True)

    def action_later(self) -> None:
        if self.records and self.records[-1].seq < self.last_seq:
            self._read(self.records[-1].seq + 1, cursor_last=False)

    def action_goto(self) -> None:
        box = self.query_one("#seq", Input)
        box.add_class("shown")
        box.value = ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("shown")
        self.table.focus()
        text = event.value.strip().replace(",", "").replace("_", "")
        if not text.isdigit() or not 1 <= int(text) <= max(1, self.last_seq):
            self.notify(f"no seq {event.value.strip()!r}: the run has seq 1 to {self.last_seq}")
            return
        self._read(int(text), cursor_last=False)

    def action_copy(self) -> None:
        rec = self.selected()
        if rec is None:
            return
        self.copied = rec.canonical.decode("utf-8", "replace")
        self.app.copy_to_clipboard(self.copied)
        self.notify(f"copied record seq {rec.seq} ({len(rec.canonical):,} bytes)")
