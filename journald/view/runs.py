"""The runs screen: a live table of every run, sortable and filterable. It Lists when the
daemon's ListChanges stream says a run changed (at most once per ``REFRESH_S``), so an idle
table asks the daemon nothing; a daemon without that stream is polled instead.

Filter words: ``status:held``, ``label:team=blue`` (or ``label:team``), anything else is
text looked for in the run id, model, prompt preview, labels and holder. Words combine (all
must match).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from journald_client import DaemonUnavailable, JournaldError, ListChange, ListChanges
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Static

from journald.cli.replay import cell_width, elide_end, one_line
from journald.view.base import DaemonScreen
from journald.view.data import RunRow

REFRESH_S = 1.0  # the soonest List after the one before (notices of a busy run coalesce)
# polling, for a daemon without ListChanges: List again this soon after a listing that changed
# something; the wait doubles while nothing changes, up to REFRESH_IDLE_MAX_S
REFRESH_IDLE_MAX_S = 5.0
REFOLLOW_S = 0.5  # a ListChanges stream that ended while the daemon answers: follow again
TICK_S = 1.0  # the relative times ("12s ago") of the rows on screen are redrawn this often
STATUS_STYLES = {
    "held": "bold green",
    "open": "yellow",
    "completed": "green",
    "suspended": "cyan",
    "error": "bold red",
    "corrupted": "bold red reverse",
    "budget": "magenta",
    "max_iterations": "magenta",
}


def _parse(ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def short_time(ts: str) -> str:
    """``2026-11-30T12:00:05.123456Z`` -> ``11-30 12:00:05`` in the local zone."""
    when = _parse(ts)
    if when is None:
        return ts or "-"
    return when.astimezone().strftime("%m-%d %H:%M:%S")


def zone_name() -> str:
    """The local zone as the times are shown (``UTC+01:00``)."""
    offset = datetime.now(UTC).astimezone().strftime("%z")
    return f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC"


def ago(ts: str, now_s: float) -> str:
    """``12s ago``, ``3m ago``, ``5h ago`` within a day, else the local ``11-30 12:00``."""
    when = _parse(ts)
    if when is None:
        return ts or "-"
    secs = now_s - when.timestamp()
    if secs < 0:
        return "now"
    for unit, size, limit in (("s", 1, 60), ("m", 60, 3600), ("h", 3600, 86400)):
        if secs < limit:
            return f"{int(secs // size)}{unit} ago"
    return when.astimezone().strftime("%m-%d %H:%M")


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


FIXED_MIN = {"status": 6, "records": 7, "updated": 7, "pending": 7}
FLEX_MIN = {"run": 8, "model": 6, "holder": 6, "prompt": 6}
SQUEEZE = ("prompt", "holder", "model", "run")  # what gives up room first when there is none
CELL_GAP = 1  # the table has no cell padding: each column is one cell wider than its text


def widths(rows: Sequence[RunRow], width: int, now_s: float) -> dict[str, int]:
    """Column widths that fit ``width`` cells: the short columns as wide as their longest
    value, then run, model and holder up to their longest value from what is left (never
    below a minimum), and the prompt the rest."""
    want = {key: cell_width(title) for key, title in COLUMNS}
    for row in rows:
        for (key, _), text in zip(COLUMNS, plain_cells(row, now_s), strict=True):
            want[key] = max(want[key], cell_width(text))
    out = {k: max(m, want[k]) for k, m in FIXED_MIN.items()}
    out.update(FLEX_MIN)
    room = width - sum(out.values()) - CELL_GAP * len(COLUMNS) - 2  # 2: the scrollbar
    for key in ("run", "model", "holder"):
        extra = max(0, min(room, want[key] - out[key]))
        out[key] += extra
        room -= extra
    out["prompt"] += max(0, room)
    for key in SQUEEZE:  # a terminal narrower than the minimums: cut, never scroll sideways
        take = min(max(0, -room), out[key] - 3)
        out[key] -= take
        room += take
    return out


def plain_cells(row: RunRow, now_s: float) -> tuple[str, ...]:
    i = row.info
    pending = "-" if row.pending_calls is None else str(row.pending_calls)
    return (
        one_line(i.run_id),
        one_line(i.status),
        one_line(i.model) or "-",
        f"{i.record_count:,}",
        ago(i.updated, now_s),
        pending,
        one_line(i.holder.name) if i.holder else "",
        one_line(i.prompt_preview),
    )


def cells(row: RunRow, cols: dict[str, int], now_s: float) -> tuple[Text, ...]:
    """The row's cells cut to the column widths; the status in its colour."""
    out = []
    for (key, _), text in zip(COLUMNS, plain_cells(row, now_s), strict=True):
        cut = elide_end(text, cols[key])
        style = STATUS_STYLES.get(text, "") if key == "status" else ""
        if key in ("records", "pending"):  # right-aligned by hand: rich trims a trailing gap
            cut = " " * (cols[key] - cell_width(cut)) + cut
        out.append(Text(cut, style=style))
    return tuple(out)


class RunsTable(DataTable[Text]):
    """The runs; enter opens the run's transcript (shown in the footer)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Transcript"),
    ]

    def visible_rows(self) -> range:
        """The row indexes on screen (the header row takes one line)."""
        top = int(self.scroll_y)
        return range(top, min(self.row_count, top + max(1, self.size.height - 1)))

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        screen = self.screen
        if isinstance(screen, RunsScreen) and int(old) != int(new):
            screen.tick()  # rows scrolled into view may show stale relative times


class RunsScreen(DaemonScreen):
    """Every run the daemon holds; enter opens its transcript, d its details."""

    DEFAULT_CSS = """
    RunsScreen #summary { height: 1; padding: 0 1; background: $panel; }
    RunsScreen #filter { height: 3; display: none; }
    RunsScreen #filter.shown { display: block; }
    RunsScreen RunsTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "details", "Details"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("r", "reverse", "Reverse", show=False),
        Binding("x", "delete", "Delete", show=False),
        Binding("R", "records", "Records", show=False),
        Binding("y", "copy", "Copy run id", show=False),
        Binding("o", "open_fork", "Open the fork just made", show=False),
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
        self.copied = ""  # what y copied last (tests read it)
        self.rebuilds = 0  # how often the table was filled (tests: not when nothing moved)
        self.cells_updated = 0  # cells redrawn in place (tests: only what is on screen)
        self.poll_delay_s = REFRESH_S  # until the next List
        self._poll: Timer | None = None
        self._cols: dict[str, int] = {}
        self.live = False  # a ListChanges stream says when to List (else: poll)
        self.lists = 0  # Lists sent (tests: none while nothing changes)
        self._stream: ListChanges | None = None
        self._listed_at = float("-inf")  # monotonic time of the last List sent
        self._soon: Timer | None = None  # the List a notice asked for, after REFRESH_S
        self._generation = 0  # of the ListChanges stream being read
        self.follows = 0  # ListChanges streams started (tests: again after one ends)

    def compose(self) -> ComposeResult:
        yield Static("connecting…", id="summary")
        yield Input(placeholder="filter: status:held label:team=blue text", id="filter")
        yield RunsTable(cursor_type="row", zebra_stripes=True, cell_padding=0, id="runs")
        yield Footer()

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    def on_mount(self) -> None:
        self.table.focus()
        self.reload()
        self.follow()
        self.set_interval(TICK_S, self.tick)

    def on_unmount(self) -> None:
        self._generation += 1
        self._stop_following()

    def on_screen_resume(self) -> None:
        self.poll_delay_s = REFRESH_S
        self.reload()

    # --- when to List: on the daemon's notices, else by polling -----------------------------

    def follow(self) -> None:
        """Read the daemon's ListChanges notices in a worker thread; each asks for a List."""
        self._stop_following()
        app = self.viewer
        self._generation += 1
        self.follows += 1
        mine = self._generation  # a stream replaced by a newer one reports nothing

        def back(fn: Callable[..., None], *args: object) -> None:
            self._back(lambda: fn(*args) if mine == self._generation else None)

        def job() -> None:
            try:
                stream = self._stream = self.source.list_changes()
                for change in stream:
                    back(self._noticed, change)
            except JournaldError as err:
                if not isinstance(err, DaemonUnavailable):  # e.g. an older daemon: unimplemented
                    back(self._not_live, err)
                    return
            if mine != self._generation:
                return  # stopped or replaced on purpose
            # the stream ended: a daemon that asks an old connection to go away (its maximum
            # connection age) ends it too, so while the daemon answers, follow it again (the
            # new stream's ready notice brings a List: nothing is missed)
            if self.source.ping():
                back(self._follow_soon)
            else:
                back(self._not_live, None)
                self._back(app.daemon_lost)

        self.run_worker(job, thread=True, group="changes", exclusive=True, exit_on_error=False)

    def _follow_soon(self) -> None:
        self.set_timer(REFOLLOW_S, self.follow)

    def _stop_following(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()

    def _noticed(self, change: ListChange) -> None:
        if change.ready:  # live from now on: a List now misses nothing
            self.live = True
            self.reload()
            return
        if self._soon is not None:  # a List is already coming; this notice joins it
            return
        wait = self._listed_at + REFRESH_S - time.monotonic()
        if wait <= 0:
            self.reload()
        else:
            self._soon = self.set_timer(wait, self.reload)

    def _not_live(self, err: JournaldError | None) -> None:
        """The stream ended: poll until it can be followed again (after a reconnect)."""
        was_live, self.live = self.live, False
        if err is not None and err.code != "unimplemented":
            self.show_error(err)
        if was_live or err is not None:
            self._next_poll(moved=True)

    def reload(self) -> None:
        """List now. Without a ListChanges stream, also again after ``poll_delay_s``
        (which doubles while nothing changes, so an idle table asks ever less often)."""
        for timer in (self._poll, self._soon):
            if timer is not None:
                timer.stop()
        self._poll = self._soon = None
        # under another screen nothing of this one shows: List only when it is on top (the
        # screen Lists when it is shown again)
        if self.viewer.offline or self.app.screen is not self:
            return
        self.lists += 1
        self._listed_at = time.monotonic()
        self.fetch(self.source.runs, self._got, group="runs", exclusive=True, failed=self._failed)

    def _failed(self, err: JournaldError) -> None:
        self.show_error(err)
        self._next_poll(moved=False)

    def _next_poll(self, moved: bool) -> None:
        if self._poll is not None:
            self._poll.stop()
            self._poll = None
        if self.live:
            return  # the daemon's notices say when
        grown = min(REFRESH_IDLE_MAX_S, self.poll_delay_s * 2)
        self.poll_delay_s = REFRESH_S if moved else grown
        self._poll = self.set_timer(self.poll_delay_s, self.reload)

    def reconnected(self) -> None:
        self.poll_delay_s = REFRESH_S
        self.reload()
        self.follow()

    def on_resize(self) -> None:
        if self.loaded:
            self._show()

    def _got(self, rows: list[RunRow]) -> None:
        moved = rows != self.rows or not self.loaded
        self.rows = rows
        self.loaded = True
        if moved:
            self._show()
        else:
            self.tick()
        self._next_poll(moved)

    def _now(self) -> float:
        return self.viewer.clock()

    def tick(self) -> None:
        """The relative times of the rows on screen that changed are redrawn (nothing else:
        a table of hundreds of runs costs what its visible rows cost)."""
        if not self.loaded or self.app.screen is not self:
            return
        now = self._now()
        col = self._cols.get("updated", 11)
        for i in self.table.visible_rows():
            if i >= len(self.shown):
                break
            info = self.shown[i].info
            self._set_cell(info.run_id, "updated", Text(elide_end(ago(info.updated, now), col)))

    def _set_cell(self, key: str, column: str, cell: Text) -> None:
        with contextlib.suppress(Exception):  # a row removed meanwhile
            old = self.table.get_cell(key, column)
            if str(old) != str(cell) or old.style != cell.style:
                self.table.update_cell(key, column, cell)
                self.cells_updated += 1

    def _show(self) -> None:
        table = self.table
        selected = self.selected_run()
        shown = arrange(self.rows, self.filter, self.sort, self.reverse)
        now = self._now()
        cols = widths(self.rows, table.size.width or self.size.width or 80, now)
        same_rows = [r.info.run_id for r in shown] == [r.info.run_id for r in self.shown]
        if cols == self._cols and same_rows and table.row_count == len(shown):
            # the same runs in the same order: redraw only the cells that changed
            for old, new in zip(self.shown, shown, strict=True):
                if old != new:
                    for (key, _), cell in zip(COLUMNS, cells(new, cols, now), strict=True):
                        self._set_cell(new.info.run_id, key, cell)
            self.shown = shown
            self._summary()
            return
        self.shown = shown
        self.rebuilds += 1
        if cols != self._cols:
            table.clear(columns=True)
            for key, title in COLUMNS:
                table.add_column(title, key=key, width=cols[key] + CELL_GAP)
            self._cols = cols
        else:
            table.clear()
        for row in self.shown:
            table.add_row(*cells(row, cols, now), key=row.info.run_id)
        index = next((n for n, r in enumerate(self.shown) if r.info.run_id == selected), 0)
        if self.shown:
            table.move_cursor(row=index, animate=False)
        self._summary()

    def _summary(self) -> None:
        held = sum(1 for r in self.rows if r.info.holder is not None)
        order = f"sorted by {self.sort}{' (reversed)' if self.reverse else ''}"
        text = self.query_one("#filter", Input).value.strip()
        what = f" matching {text!r}" if text else ""
        runs = "run" if len(self.rows) == 1 else "runs"
        self.query_one("#summary", Static).update(
            Text(
                f"{len(self.shown)} of {len(self.rows)} {runs}{what} · {held} held · {order}"
                f" · times {zone_name()}"
            )
        )

    def selected_run(self) -> str | None:
        table = self.table
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

    def action_open_fork(self) -> None:
        """The transcript of the run this viewer forked last (details f, a marker's f)."""
        fork = self.viewer.last_fork
        if not fork:
            self.notify("no fork made yet (f on a checkpoint in the details or on a marker)")
            return
        index = next((n for n, r in enumerate(self.shown) if r.info.run_id == fork), None)
        if index is not None:
            self.table.move_cursor(row=index, animate=False)
        self.viewer.open_transcript(fork)

    def action_details(self) -> None:
        run = self.selected_run()
        if run is not None:
            self.viewer.open_details(run)

    def action_records(self) -> None:
        run = self.selected_run()
        if run is not None:
            from journald.view.records import RecordsScreen

            self.app.push_screen(RecordsScreen(run))

    def action_copy(self) -> None:
        run = self.selected_run()
        if run is not None:
            self.copied = run
            self.app.copy_to_clipboard(run)
            self.notify(f"copied run id {run}", markup=False)

    def action_delete(self) -> None:
        run = self.selected_run()
        if run is None:
            return
        from journald.view.details import Ask, Confirm

        ask = Ask(
            "Delete this run?",
            f"Run {run} and its checkpoints are removed from the daemon's store for good.",
            "Delete",
        )

        def answered(value: str | None) -> None:
            if value is None:
                return

            def done(deleted: bool) -> None:
                self.notify(f"deleted run {run}" if deleted else f"run {run} was already gone")
                self.reload()

            self.fetch(lambda: self.source.delete(run), done)

        self.app.push_screen(Confirm(ask), answered)

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
        self.table.focus()
        self._show()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter = Filter.parse(event.value)
            if self.loaded:
                self._show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value.strip():
                event.input.remove_class("shown")
            self.table.focus()
