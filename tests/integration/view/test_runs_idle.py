"""An idle runs table costs what its visible rows cost (issue 28 Build: "near-zero CPU when
idle: refresh only what is visible, from List changes rather than a full rebuild"): relative
times are redrawn for the rows on screen only, a run that changed in place redraws its cells
without refilling the table; the table Lists only when the daemon's ListChanges stream names a
change, and against a daemon without that stream the List wait grows while nothing changes."""

from __future__ import annotations

import time
from pathlib import Path

import journald_client as jc
import pytest

from journald.view import runs
from journald.view.app import ViewerApp
from tests.daemon import Daemon
from tests.integration.view.test_view_app import runs_screen, turns
from tests.integration.view.test_view_daily_use import CountingSource, PollingSource
from tests.integration.view_runs import FP, until

RUNS = 40


async def test_an_idle_runs_table_redraws_only_visible_rows_and_lists_ever_less_often(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same doubling from a shorter first wait, so the test waits less for its cap
    monkeypatch.setattr(runs, "REFRESH_S", 0.2)
    monkeypatch.setattr(runs, "REFRESH_IDLE_MAX_S", 0.8)
    with jc.connect(str(daemon.socket)) as jd:
        for i in range(RUNS):
            with jd.start(f"idle{i:02d}", FP, "x") as run:
                run.append_many(turns(1))
    shift = [0.0]  # the viewer's clock runs ahead by this much (no waiting on real time)
    source = PollingSource(str(daemon.socket))  # a daemon without ListChanges
    app = ViewerApp(source, clock=lambda: time.time() + shift[0])
    async with app.run_test(size=(100, 20)) as pilot:
        screen = runs_screen(app)
        await until(pilot, lambda: screen.loaded and len(screen.rows) == RUNS, "the runs table")
        table = screen.table
        visible = len(table.visible_rows())
        assert 0 < visible < RUNS

        # every run's "Ns ago" becomes "2m ago": only the rows on screen are redrawn
        before = screen.cells_updated
        shift[0] = 150.0
        screen.tick()
        assert 0 < screen.cells_updated - before <= visible
        assert "2m ago" in str(table.get_cell(screen.shown[0].info.run_id, "updated"))

        # nothing changes: the wait before the next List doubles up to its cap
        await until(
            pilot, lambda: screen.poll_delay_s == runs.REFRESH_IDLE_MAX_S, "the longest wait"
        )
        assert screen.rebuilds == 1

        # the newest run moves in place (same order): its cells change, the table is not refilled
        newest = screen.shown[0].info.run_id
        # (a holder named "t" fits the columns as they are, should a List see it held)
        with jc.connect(str(daemon.socket), name="t") as jd, jd.resume(newest, FP) as run:
            run.assistant("again", stop_reason="end_turn")
        screen.reload()  # what the next poll does, now rather than after the wait
        await until(pilot, lambda: screen.shown[0].info.record_count == 4, "the new count")
        assert screen.rebuilds == 1
        assert str(table.get_cell(newest, "records")).strip() == "4"
        assert screen.poll_delay_s == runs.REFRESH_S  # something moved: List again soon


async def test_a_live_runs_table_lists_nothing_while_idle_and_shows_a_change_at_once(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        for i in range(RUNS):
            with jd.start(f"live{i:02d}", FP, "x") as run:
                run.append_many(turns(1))
    source = CountingSource(str(daemon.socket))
    app = ViewerApp(source)
    async with app.run_test(size=(100, 20)) as pilot:
        screen = runs_screen(app)
        await until(pilot, lambda: screen.live and len(screen.rows) == RUNS, "a live table")
        await until(pilot, lambda: screen.lists == source.lists, "the first Lists answered")
        lists = source.lists

        # nothing changes for longer than the old poll's longest wait: not one List
        t0 = time.monotonic()
        await until(pilot, lambda: time.monotonic() > t0 + runs.REFRESH_IDLE_MAX_S + 1, "idle")
        assert source.lists == lists
        assert screen.rebuilds == 1

        # a run changes: the daemon's notices bring a List or a few (hold, append, release)
        newest = screen.shown[0].info.run_id
        with jc.connect(str(daemon.socket), name="t") as jd, jd.resume(newest, FP) as run:
            run.assistant("again", stop_reason="end_turn")
        await until(pilot, lambda: screen.shown[0].info.record_count == 4, "the new count")
        await until(pilot, lambda: screen.shown[0].info.status == "open", "the release")
        assert 1 <= source.lists - lists <= 5  # at most one a second while it changes
        assert screen.rebuilds == 1  # the run changed in place: its cells, not the table


async def test_a_runs_table_follows_again_when_the_daemon_recycles_its_connection(
    tmp_path: Path,
) -> None:
    # a daemon that asks every connection to go away after 1 s (3600 s by default): the
    # viewer, open all day, meets this every hour
    age = ("--max-connection-age-s", "1", "--connection-age-grace-s", "0.5")
    with Daemon(tmp_path, "memory", *age) as d:
        source = CountingSource(str(d.socket))
        app = ViewerApp(source)
        lost: list[bool] = []  # the "daemon not running" screen, had it been shown
        shown_lost = app.daemon_lost

        def daemon_lost() -> None:
            lost.append(True)
            shown_lost()

        app.daemon_lost = daemon_lost  # type: ignore[method-assign]
        async with app.run_test(size=(100, 20)) as pilot:
            screen = runs_screen(app)
            await until(pilot, lambda: screen.live and screen.loaded, "a live table")
            await until(pilot, lambda: screen.follows >= 3, "the stream followed again twice")
            with jc.connect(str(d.socket)) as jd, jd.start("after-recycling", FP, "x"):
                await until(pilot, lambda: len(screen.rows) == 1, "a run made since")
            assert screen.live
            assert not lost  # never told the daemon was gone: it was there all along
