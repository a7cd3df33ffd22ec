"""``journald view`` for daily use (issue 28 items 3-7): a runs table that fits the terminal
and stays quiet when nothing moves, a stopped daemon told apart from a deleted run, error
text shown as written, and the polish (counts, end lines, markers, the footer, ``?``)."""

from __future__ import annotations

import time

import journald_client as jc
from rich.console import Console
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from journald.view.app import NotRunningScreen, ViewerApp
from journald.view.data import RunRow, Source
from journald.view.details import DetailsScreen
from journald.view.help import HelpScreen
from journald.view.runs import RunsScreen
from journald.view.transcript_screen import TranscriptScreen
from tests.daemon import Daemon
from tests.integration.view.test_view_app import loaded, runs_screen, shows, transcript, turns
from tests.integration.view_runs import FP, ready, until

LONG_MODEL = "claude-sonnet-4-5-20250929-with-a-long-name"


def head(app: ViewerApp) -> str:
    return str(transcript(app).query_one("#head").render())


def notices(app: ViewerApp) -> list[str]:
    return [n.message for n in app._notifications]


class CountingSource(Source):
    """Counts the List rounds of the runs table."""

    lists = 0

    def runs(self) -> list[RunRow]:
        self.lists += 1
        return super().runs()


class PollingSource(CountingSource):
    """A daemon older than ListChanges, as the viewer sees it: the stream is refused with
    ``unimplemented`` (what the client raises for gRPC's UNIMPLEMENTED), so the table polls."""

    def list_changes(self) -> jc.ListChanges:
        err = jc.JournaldError("Method not found!")
        err.code = "unimplemented"
        raise err


async def test_the_runs_table_fits_the_width_and_the_filter_box_hides_nothing(
    daemon: Daemon,
) -> None:
    fp = jc.compute(
        provider="anthropic",
        model=LONG_MODEL,
        system_prompt=["sys"],
        tools=[],
        thinking="off",
        max_tokens=256,
        max_iterations=100,
    )
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("wide-model-run", fp, "a prompt that is long enough to be cut") as run:
            run.append_many(turns(1))
        run = jd.start("still-open", fp, "held", name="a-holder")
        try:
            for size in ((80, 24), (160, 30)):
                await _check_width(daemon, size)
        finally:
            run.close()


async def _check_width(daemon: Daemon, size: tuple[int, int]) -> None:
    app = ViewerApp(Source(str(daemon.socket)))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
        table = runs_screen(app).query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2, "both runs")
        assert table.max_scroll_x == 0, f"a horizontal scrollbar at {size}"
        statuses = [str(table.get_cell_at(Coordinate(r, 1))).strip() for r in range(2)]
        assert sorted(statuses) == ["held", "open"]
        if size[0] >= 120:
            assert LONG_MODEL in [
                str(table.get_cell_at(Coordinate(r, 2))).strip() for r in range(2)
            ]
        held = next(
            r for r in range(2) if str(table.get_cell_at(Coordinate(r, 1))).strip() == "held"
        )
        assert "green" in str(table.get_cell_at(Coordinate(held, 1)).style)

        await pilot.press("slash")
        summary = app.screen.query_one("#summary", Static)
        box = app.screen.query_one("#filter")
        await until(pilot, lambda b=box: b.region.height > 0, "the filter box")  # type: ignore[misc]
        assert not summary.region.overlaps(box.region)
        assert "2 of 2 runs" in str(summary.render())


async def test_a_polled_runs_table_lists_only_on_top_and_redraws_only_what_moved(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        for i in range(30):
            with jd.start(f"quiet{i}", FP, "x") as run:
                run.append_many(turns(1))
    source = PollingSource(str(daemon.socket))
    app = ViewerApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = runs_screen(app)
        await until(pilot, lambda: screen.loaded, "the runs table")
        lists = source.lists
        await until(pilot, lambda: source.lists >= lists + 3, "three refreshes")
        assert screen.rebuilds == 1  # nothing moved: the table was filled once

        await pilot.press("enter")
        await until(pilot, lambda: loaded(app), "a transcript")
        under = source.lists
        t0 = time.monotonic()
        await until(pilot, lambda: time.monotonic() > t0 + 3.5, "three refresh periods")
        assert source.lists <= under + 1  # at most one already under way

        await pilot.press("escape")
        await until(pilot, lambda: source.lists > under + 1, "a refresh on return")
        with jc.connect(str(daemon.socket)) as jd, jd.start("new-one", FP, "y"):
            await until(pilot, lambda: len(screen.rows) == 31, "the new run")
        assert screen.rebuilds == 2


async def test_a_watch_that_ends_while_the_run_is_there_is_not_a_deletion(
    daemon: Daemon,
) -> None:
    # A daemon stopping ends every Watch first and answers for a moment longer: the stream's
    # end, with the daemon answering and the run listed, is what a SIGTERM looked like (it was
    # reported as a deleted run). The stream is ended here from the client side, at once.
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("stays", FP, "keep me") as run:
            run.append_many(turns(2))
        with jd.start("goes", FP, "delete me") as run:
            run.append_many(turns(1))
        app = ViewerApp(Source(str(daemon.socket)), "stays", retry_first_s=0.1, retry_cap_s=0.3)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: shows(app, "output of step 1"), "the transcript")
            screen = transcript(app)
            await until(pilot, lambda: screen.watch_handle is not None, "the Watch")
            first = screen.watch_handle
            assert first is not None
            first.cancel()
            await until(
                pilot,
                lambda: screen.watch_handle not in (None, first),
                "a new Watch on the same run",
            )
            with jd.resume("stays", FP) as run:
                run.append_many(turns(1, first=2))
            await until(pilot, lambda: shows(app, "output of step 2"), "live again")
            assert not any("no longer there" in n for n in notices(app))

            daemon.stop()  # SIGTERM
            await until(pilot, lambda: ready(app, NotRunningScreen, "#box", focus=False), "down")
            daemon.start()
            await until(pilot, lambda: not app.offline and loaded(app), "the reconnect")
            assert not any("no longer there" in n for n in notices(app))

            app.push_screen(TranscriptScreen("goes"))
            await until(pilot, lambda: shows(app, "output of step 0"), "the other run")
            jd.delete("goes")
            await until(
                pilot, lambda: any("no longer there" in n for n in notices(app)), "the deletion"
            )


async def test_an_error_is_shown_as_written_and_in_the_header(daemon: Daemon) -> None:
    app = ViewerApp(Source(str(daemon.socket)), "../x")
    async with app.run_test(size=(120, 24)) as pilot:
        await until(pilot, lambda: "loading" not in head(app), "the header to say what failed")
        assert "^[A-Za-z0-9][A-Za-z0-9_-]*$" in head(app)
        await until(pilot, lambda: notices(app), "the notice")
        assert any("^[A-Za-z0-9][A-Za-z0-9_-]*$" in n for n in notices(app))
        assert not any(n.markup for n in app._notifications)
    app = ViewerApp(Source(str(daemon.socket)), "no-such-run")
    async with app.run_test(size=(120, 24)) as pilot:
        await until(pilot, lambda: "not found" in head(app), "not found in the header")


async def test_counts_end_lines_markers_footer_help_and_details_read_well(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("one", FP, "only the prompt") as run:
            run.terminal("error", "the tool server went away" + " and nobody restarts it" * 3)
        with jd.start("squashed", FP, "compact me") as run:
            run.append_many(turns(6))
        result = jd.compact("squashed", "SUMMARY: six steps ran", keep_last=2)
        assert result.compacted
    app = ViewerApp(Source(str(daemon.socket)), "one")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: loaded(app), "the transcript")
        assert " 1 message " in head(app)
        await until(pilot, lambda: shows(app, "the tool server went away"), "the end line")
        assert transcript(app).view.line_texts()[-1].startswith("── ended: error · the tool")

        await pilot.press("question_mark")
        await until(pilot, lambda: ready(app, HelpScreen, "#keys", focus=False), "the help")
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.text()
        for words in ("go to message N", "Older match", "Details", "Quit", "Home / g"):
            assert words in text
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, TranscriptScreen), "the transcript")

        await pilot.press("d")
        await until(
            pilot,
            lambda: isinstance(app.screen, DetailsScreen) and app.screen.details is not None,
            "details",
        )
        assert isinstance(app.screen, DetailsScreen)
        facts = app.screen.facts
        console = Console(width=60, record=True, color_system=None)
        console.print(facts)
        lines = console.export_text().splitlines()
        at = next(i for i, ln in enumerate(lines) if "the tool server" in ln)
        column = lines[at].index("error")  # the value column
        assert lines[at + 1][:column].strip() == ""  # the rest of the value wraps under it
        assert "restarts" in lines[at + 1]
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "the runs")
        enter = app.screen.active_bindings.get("enter")
        assert enter is not None
        assert enter.binding.show
        assert enter.binding.description == "Transcript"

        app.push_screen(TranscriptScreen("squashed"))
        await until(pilot, lambda: shows(app, "SUMMARY: six steps"), "the compacted run")
        texts = transcript(app).view.line_texts()
        marker = next(i for i, t in enumerate(texts) if "compaction at seq" in t)
        assert marker < next(i for i, t in enumerate(texts) if "SUMMARY" in t)

        with jc.connect(str(daemon.socket)) as jd:
            jd.fork("squashed", new_run_id="offshoot")
        app.push_screen(TranscriptScreen("offshoot"))
        await until(pilot, lambda: shows(app, "── fork of run squashed at seq"), "the fork marker")
