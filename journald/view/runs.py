"""The runs screen: a live table of every run (List, polled), sortable and filterable.

Filter words: ``status:held``, ``label:team=blue`` (or ``label:team``), anything else is
text looked for in the run id, model, prompt preview, labels and holder. Words combine (all
must match).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static

from journald.replay import elide_end, one_line
from journald.view.base import DaemonScreen
from journald.view.data import RunRow

REFRESH_S = 1.0


def short_time(ts: str) -> str:
    """``2026-11-30T12:00:05.123456Z`` -> ``11-30 12:00:05``."""
    return ts[5:19].replace("T", " ") if len(ts) >= 19 else (ts or "-")


@dataclass(frozen=True, slots=True)
class Filter:
    statuses: tuple[str, ...] = ()
    labels: tuple[tuple[str, str | None], ...] = ()
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Filter:
        statuses, labels, words = [], [], []
        for word in text.split():
            low = word.lower()
            if low.startswith("status:") and len(word) > 7:
                statuses.append(low[7:])
            elif low.startswith("label:") and len(word) > 6:
                key, eq, value = word[6:].partition("=")
                labels.append((key, value if eq else None))
            else:
                words.append(low)
        return cls(tuple(statuses), tuple(labels), tuple(words))

    def matches(self, row: RunRow) -> bool:
        i = row.info
        if self.statuses and i.status.lower() not in self.statuses:
            return False
        for key, value in self.labels:
            if key not in i.labels or (value is not None and i.labels[key] != value):
                return False
        if self.words:
            hay = " ".join(
                [i.run_id, i.model, i.prompt_preview, i.status]
                + [f"{k}={v}" for k, v in i.labels.items()]
                + ([i.holder.name] if i.holder else [])
            ).lower()
            return all(w in hay for w in self.words)
        return True


SORTS: dict[str, Callable[[RunRow], Any]] = {
    "updated": lambda r: r.info.updated,
    "run": lambda r: r.info.run_id,
    "status": lambda r: r.info.status,
    "records": lambda r: r.info.record_count,
    "pending": lambda r: r.pending_calls or 0,
}
COLUMNS = (
    ("run", "RUN"),
    ("status", "STATUS"),
    ("model", "MODEL"),
    ("records", "RECORDS"),
    ("updated", "UPDATED"),
    ("pending", "PENDING"),
    ("holder", "HOLDER"),
    ("prompt", "PROMPT"),
)


def arrange(rows: Sequence[RunRow], flt: Filter, sort: str, reverse: bool) -> list[RunRow]:
    """The rows that pass ``flt``, ordered by ``sort`` (newest/largest first unless
    ``reverse``); ties keep the daemon's newest-first order."""
    kept = [r for r in rows if flt.matches(r)]
    descending = sort in ("updated", "records", "pending")
    kept.sort(key=SORTS[sort], reverse=descending != reverse)
    return kept


def cells(row: RunRow) -> tuple[str, ...]:
    i = row.info
    pending = "-" if row.pending_calls is None else str(row.pending_calls)
    return (
        elide_end(one_line(i.run_id), 24),
        one_line(i.status),
        elide_end(one_line(i.model) or "-", 16),
        str(i.record_count),
        short_time(i.updated),
        pending,
        elide_end(one_line(i.holder.name), 16) if i.holder else "",
        elide_end(one_line(i.prompt_preview), 40),
    )


class RunsScreen(DaemonScreen):
    """Every run the daemon holds; enter opens its transcript, d its details."""

    DEFAULT_CSS = """
    RunsScreen #filter { dock: top; height: 3; display: none; }
    RunsScreen #filter.shown { display: block; }
    RunsScreen #summary { dock: top; height: 1; padding: 0 1; background: $panel; }
    RunsScreen DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Transcript"),
        Binding("d", "details", "Details"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("r", "reverse", "Reverse", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[RunRow] = []
        self.shown: list[RunRow] = []
        self.filter = Filter()
        self.sort = "updated"
        self.reverse = False
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Static("connecting…", id="summary")
        yield Input(placeholder="filter: status:held label:team=blue text", id="filter")
        table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=True, id="runs")
        for key, title in COLUMNS:
            table.add_column(title, key=key)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.reload()
        self.set_interval(REFRESH_S, self.reload)

    def reload(self) -> None:
        if self.viewer.offline:
            return
        self.fetch(self.source.runs, self._got, group="runs", exclusive=True)

    def reconnected(self) -> None:
        self.reload()

    def _got(self, rows: list[RunRow]) -> None:
        self.rows = rows
        self.loaded = True
        self._show()

    def _show(self) -> None:
        table: DataTable[str] = self.query_one(DataTable)
        selected = self.selected_run()
        self.shown = arrange(self.rows, self.filter, self.sort, self.reverse)
        table.clear()
        for row in self.shown:
            table.add_row(*cells(row), key=row.info.run_id)
        index = next((n for n, r in enumerate(self.shown) if r.info.run_id == selected), 0)
        if self.shown:
            table.move_cursor(row=index, animate=False)
        held = sum(1 for r in self.rows if r.info.holder is not None)
        order = f"sorted by {self.sort}{' (reversed)' if self.reverse else ''}"
        text = self.query_one("#filter", Input).value.strip()
        what = f" matching {text!r}" if text else ""
        self.query_one("#summary", Static).update(
            f"{len(self.shown)} of {len(self.rows)} runs{what} · {held} held · {order}"
        )

    def selected_run(self) -> str | None:
        table: DataTable[str] = self.query_one(DataTable)
        if not self.shown or table.cursor_row < 0 or table.cursor_row >= len(self.shown):
            return None
        return self.shown[table.cursor_row].info.run_id

    # --- actions ---------------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key in SORTS:
            self.reverse = not self.reverse if key == self.sort else False
            self.sort = key
            self._show()

    def action_open(self) -> None:
        run = self.selected_run()
        if run is not None:
            self.viewer.open_transcript(run)

    def action_details(self) -> None:
        run = self.selected_run()
        if run is not None:
            self.viewer.open_details(run)

    def action_sort(self) -> None:
        names = list(SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self.reverse = False
        self._show()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._show()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.filter = Filter()
        self.query_one(DataTable).focus()
        self._show()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter = Filter.parse(event.value)
            self._show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value.strip():
                event.input.remove_class("shown")
            self.query_one(DataTable).focus()
