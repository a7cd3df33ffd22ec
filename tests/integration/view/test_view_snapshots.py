"""SVG snapshots of the viewer's main screens at 80x24 (pytest-textual-snapshot), on runs with
fixed ids and timestamps served by a real daemon.

The snapshots under ``__snapshots__/test_view_snapshots/`` were reviewed by eye. A missing
or different snapshot fails the test: they are written only by hand, after reviewing the
change, with ``pytest tests/integration/view/test_view_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DataTable

from journald.view.app import NotRunningScreen, ViewerApp
from journald.view.data import Source
from journald.view.details import DetailsScreen
from journald.view.help import HelpScreen
from journald.view.records import RecordsScreen
from journald.view.runs import RunsScreen
from journald.view.transcript_screen import TranscriptScreen
from tests.daemon import Daemon
from tests.integration.view_runs import Writer, pending_run, research_run, triage_run, until

SIZE = (80, 24)
Snap = Callable[..., bool]


NOW_S = datetime(2026, 11, 30, 12, 5, tzinfo=UTC).timestamp()  # "3m ago" says the same forever


def at_noon(source: Source, run_id: str | None = None, **kw: Any) -> ViewerApp:
    return ViewerApp(source, run_id, clock=lambda: NOW_S, **kw)


@pytest.fixture(autouse=True)
def colours_and_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The snapshots are in colour (a NO_COLOR set in the caller's shell would make Textual
    draw them monochrome) and in UTC (times are shown in the local zone)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("view-snap"), "file").start()
    held: Writer | None = None
    try:
        research_run(d.target)
        triage_run(d.target)
        held = pending_run(d.target)  # held by "tester" for the whole module
        yield d
    finally:
        if held is not None:
            held.close()
        d.stop()


def runs_loaded(pilot: Pilot[Any]) -> Any:
    app = pilot.app
    return until(
        pilot,
        lambda: isinstance(app.screen, RunsScreen) and len(app.screen.rows) == 3,
        "the runs",
    )


def transcript_loaded(pilot: Pilot[Any]) -> Any:
    app = pilot.app
    return until(
        pilot,
        lambda: (
            isinstance(app.screen, TranscriptScreen)
            and app.screen.slice is not None
            and app.screen.opened
        ),
        "the transcript",
    )


def test_runs_screen(demo: Daemon, snap_compare: Snap) -> None:
    assert snap_compare(
        at_noon(Source(str(demo.socket))), terminal_size=SIZE, run_before=runs_loaded
    )


def test_transcript_of_a_completed_run(demo: Daemon, snap_compare: Snap) -> None:
    app = at_noon(Source(str(demo.socket)), "demo-research")
    assert snap_compare(app, terminal_size=SIZE, run_before=transcript_loaded)


def test_transcript_with_a_pending_turn(demo: Daemon, snap_compare: Snap) -> None:
    app = at_noon(Source(str(demo.socket)), "demo-pending")
    assert snap_compare(app, terminal_size=SIZE, run_before=transcript_loaded)


def test_transcript_in_a_light_terminal(demo: Daemon, snap_compare: Snap) -> None:
    app = at_noon(Source(str(demo.socket)), "demo-research", theme="light")
    assert snap_compare(app, terminal_size=SIZE, run_before=transcript_loaded)


def test_runs_screen_in_a_light_terminal(demo: Daemon, snap_compare: Snap) -> None:
    app = at_noon(Source(str(demo.socket)), theme="light")
    assert snap_compare(app, terminal_size=SIZE, run_before=runs_loaded)


def columns_fit_their_cells(table: DataTable[Any]) -> bool:
    """Whether the table has measured its rows: a DataTable widens its columns on idle, after
    the rows are added, so a capture before that shows cells cut to the header's width (a
    loaded machine's CI caught it)."""
    if table.row_count == 0:
        return False
    cells = table.get_row_at(0)
    return all(
        col.content_width >= len(str(cell))
        for col, cell in zip(table.ordered_columns, cells, strict=False)
    )


def screen_shows(app: App[Any], text: str) -> bool:
    """Whether a capture taken now shows ``text``: a DataTable that has measured its rows can
    still be drawn from lines cut to the old widths until its next refresh, which four suites
    on two cores delayed past one ``pilot.pause()``."""
    return text in html.unescape(app.export_screenshot()).replace("\xa0", " ")


def test_details_screen(demo: Daemon, snap_compare: Snap) -> None:
    async def details(pilot: Pilot[Any]) -> None:
        await transcript_loaded(pilot)
        await pilot.press("d")
        app = pilot.app
        held: dict[str, bool] = {}

        def drawn() -> bool:
            # each part on its own, so a timeout says which one never held (CI saw one)
            screen = app.screen
            held["details screen"] = isinstance(screen, DetailsScreen)
            if not isinstance(screen, DetailsScreen):
                return False
            held["details"] = screen.details is not None
            held["verified"] = screen.verified is not None
            held["widths measured"] = columns_fit_their_cells(
                screen.query_one("#checkpoints", DataTable)
            )
            held["capture shows the row"] = screen_shows(app, "(none yet: c takes one)")
            return all(held.values())

        try:
            await until(pilot, drawn, "details, verify and the checkpoints table drawn")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; held at the end: {held}") from None
        await pilot.pause()  # the table's new widths reach the screen on the next refresh

    app = at_noon(Source(str(demo.socket)), "demo-research")
    assert snap_compare(app, terminal_size=SIZE, run_before=details)


def test_not_running_screen(snap_compare: Snap) -> None:
    async def first_attempt(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, NotRunningScreen)
                and "attempt 1 failed" in app.screen.retry_text
            ),
            "the first failed attempt",
        )

    # nothing listens there; the long first retry keeps the attempt count at 1
    source = Source("/tmp/journald-view-snapshot/nowhere.sock")
    app = ViewerApp(source, retry_first_s=600, retry_cap_s=600)
    assert snap_compare(app, terminal_size=SIZE, run_before=first_attempt)


def test_help_screen_over_a_transcript(demo: Daemon, snap_compare: Snap) -> None:
    async def help_shown(pilot: Pilot[Any]) -> None:
        await transcript_loaded(pilot)
        await pilot.press("question_mark")
        app = pilot.app
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")

    app = at_noon(Source(str(demo.socket)), "demo-research")
    assert snap_compare(app, terminal_size=(80, 30), run_before=help_shown)


def test_records_screen_of_a_completed_run(demo: Daemon, snap_compare: Snap) -> None:
    async def records(pilot: Pilot[Any]) -> None:
        await transcript_loaded(pilot)
        await pilot.press("R")
        app = pilot.app
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, RecordsScreen)
                and bool(app.screen.records)
                and columns_fit_their_cells(app.screen.table)
            ),
            "the records and their table's column widths",
        )

    app = at_noon(Source(str(demo.socket)), "demo-research")
    assert snap_compare(app, terminal_size=(100, 30), run_before=records)
