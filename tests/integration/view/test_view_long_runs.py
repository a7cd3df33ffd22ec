"""``journald view`` on long runs (issue 28 items 1-2): a run opened from the table lands at
its end, Home/End/``:`` reach any place of the run at the cost of one page, the window stays
bounded while paging back, and search finds and counts matches anywhere in the run."""

from __future__ import annotations

import os
from pathlib import Path

import journald_client as jc
import pytest
from textual.widgets import DataTable, Input

from journald.view.app import ViewerApp
from journald.view.data import Source
from tests.daemon import Daemon
from tests.integration.view.test_view_app import loaded, runs_screen, shows, transcript, turns
from tests.integration.view_runs import FP, until, until_async
from tests.storage.backend_jetstream import fresh_stream

WINDOW_PAGES = 5  # the window holds LOADED_PAGES (4) pages and the one coming in


def head(app: ViewerApp) -> str:
    return str(transcript(app).query_one("#head").render())


async def test_a_run_opened_from_the_runs_table_lands_at_its_end(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("long", FP, "a long one") as run:
            for first in range(0, 2000, 500):
                run.append_many(turns(500, first=first))
            run.assistant("done " * 300, stop_reason="end_turn")
        for i in range(5):
            with jd.start(f"small{i}", FP, "x") as run:
                run.append_many(turns(1))
    app = ViewerApp(Source(str(daemon.socket)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
        for _ in range(3):
            ids = [r.info.run_id for r in runs_screen(app).shown]
            runs_screen(app).query_one(DataTable).move_cursor(row=ids.index("long"))
            await pilot.press("enter")
            await until(pilot, lambda: loaded(app), "the transcript")
            view = transcript(app).view
            await until(
                pilot,
                lambda v=view: v.max_scroll_y > 0 and v.scroll_y == v.max_scroll_y,  # type: ignore[misc]
                "the view at the end of the run",
            )
            assert view.following
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is runs_screen(app), "the runs table")


async def test_home_end_and_go_to_reach_any_message_of_a_long_run_with_one_page(
    daemon: Daemon,
) -> None:
    jd = jc.connect(str(daemon.socket))
    with jd.start("far", FP, "the very first") as run:
        for first in range(0, 1500, 500):
            run.append_many(turns(500, first=first))
    source = Source(str(daemon.socket), page=100)
    app = ViewerApp(source, "far")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 1499"), "the last page")
        screen = transcript(app)
        calls = source.stats.history_calls

        await pilot.press("home")
        await until(pilot, lambda: shows(app, "the very first"), "the first message")
        assert screen.slice is not None
        assert screen.slice.start == 0
        assert source.stats.history_calls == calls + 1  # one page, not 30
        assert screen.view.cursor == 0
        assert "at 1-" in head(app)

        calls = source.stats.history_calls
        await pilot.press("colon", *"1501", "enter")  # message 1501: step 749's call
        await until(
            pilot,
            lambda: screen.view.entries[screen.view.cursor].key[0] == 1499,
            "message 1501 under the cursor",
        )
        assert "step 749" in screen.view.entries[screen.view.cursor].haystack()
        assert source.stats.history_calls == calls + 1

        await pilot.press("end")
        await until(pilot, lambda: shows(app, "output of step 1499"), "the end again")
        await until(pilot, lambda: screen.view.following, "following the end")
        with jd.resume("far", FP) as run:
            run.append_many(turns(1, first=1500))
        await until(pilot, lambda: shows(app, "output of step 1500"), "a live append")
    jd.close()


async def test_paging_back_through_a_long_run_keeps_the_window_bounded(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("deep", FP, "page me") as run:
        run.append_many(turns(600))
    page = 50
    source = Source(str(daemon.socket), page=page)
    app = ViewerApp(source, "deep")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 599"), "the last page")
        screen = transcript(app)
        assert screen.slice is not None
        total = screen.slice.total
        fetched = source.stats.messages_fetched

        async def page_up() -> bool:
            await pilot.press("pageup", "pageup", "pageup")
            return screen.slice is not None and screen.slice.start < total - 10 * page

        await until_async(pilot, page_up, "ten pages back")
        s = screen.slice
        assert len(s.messages) <= WINDOW_PAGES * page
        assert not s.at_end
        assert shows(app, "later messages")
        pages = (total - s.start) // page
        assert source.stats.messages_fetched - fetched <= (pages + 1) * (page + 1)
        assert len(screen.view.line_texts()) < WINDOW_PAGES * page * 4


async def test_search_finds_and_counts_matches_anywhere_in_a_long_run(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("hay", FP, "hunt") as run:
        run.append_many(turns(3))
        run.assistant("the first NEEDLE", stop_reason="end_turn")
        run.append_many(turns(400, first=3))
        run.assistant("a second needle", stop_reason="end_turn")
        run.append_many(turns(300, first=403))
        run.assistant("the last Needle", stop_reason="end_turn")
        run.append_many(turns(5, first=703))
    app = ViewerApp(Source(str(daemon.socket), page=20), "hay")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 707"), "the last page")
        screen = transcript(app)

        def under_cursor() -> str:
            v = screen.view
            return v.entries[v.cursor].text if v.entries else ""

        await pilot.press("slash", *"needle", "enter")
        await until(pilot, lambda: under_cursor() == "the last Needle", "the newest match")
        await until(pilot, lambda: "'needle': 3 of 3" in head(app), "the count")
        await pilot.press("n")
        await until(pilot, lambda: under_cursor() == "a second needle", "the second match")
        await pilot.press("n")
        await until(pilot, lambda: under_cursor() == "the first NEEDLE", "the first match")
        assert "'needle': 1 of 3" in head(app)
        assert screen.slice is not None
        assert screen.slice.start <= 8
        await pilot.press("N")
        await until(pilot, lambda: under_cursor() == "a second needle", "newer again")


@pytest.mark.jetstream
async def test_the_view_pages_searches_and_follows_a_run_on_the_jetstream_backend(
    tmp_path: Path,
) -> None:
    url, stream, _ = await fresh_stream()
    sock = Path(f"/tmp/jd-view-{os.getpid()}-{stream}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", stream, socket=sock) as d,
        jc.connect(str(d.socket)) as jd,
    ):
        with jd.start("js-run", FP, "on the stream") as run:
            run.append_many(turns(150))
        source = Source(str(d.socket), page=50)
        app = ViewerApp(source)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
            assert [r.info.run_id for r in runs_screen(app).shown] == ["js-run"]
            await pilot.press("enter")
            await until(pilot, lambda: shows(app, "output of step 149"), "the last page")
            screen = transcript(app)
            assert screen.view.following
            await pilot.press("home")
            await until(pilot, lambda: shows(app, "on the stream"), "the first message")
            await pilot.press("slash", *"step 3)", "enter")  # nothing: no such text
            await pilot.press("slash")
            await until(pilot, lambda: screen.query_one("#search").has_focus, "the search box")
            screen.query_one("#search", Input).value = "output of step 120"
            await pilot.press("enter")  # from the first message: no older match
            await until(pilot, lambda: screen.search_done, "the search through the run")
            await pilot.press("N")
            await until(pilot, lambda: "1 of 1" in head(app), "the newer match, counted")
            v = screen.view
            await until(
                pilot,
                lambda: "output of step 120" in (v.entries[v.cursor].result or ""),
                "the cursor on it",
            )
            await pilot.press("end")
            await until(pilot, lambda: screen.view.following, "the end")
            with jd.resume("js-run", FP) as run:
                run.append_many(turns(1, first=150))
            await until(pilot, lambda: shows(app, "output of step 150"), "a live append")
