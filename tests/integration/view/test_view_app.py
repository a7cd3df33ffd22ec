"""``journald view`` driven headless (Textual's ``run_test`` + Pilot) against a real daemon:
navigation, a live append while the transcript is open, a pending turn answered live, the
daemon stopped and started again on the same socket, paging of a long run, search, and the
checkpoint actions of the details screen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import journald_client as jc
from journald_client import Entry

from journald.view.app import NotRunningScreen, ViewerApp
from journald.view.data import Source
from journald.view.details import Confirm, DetailsScreen
from journald.view.runs import RunsScreen
from journald.view.transcript_screen import TranscriptScreen
from tests.daemon import Daemon
from tests.integration.view_runs import (
    FP,
    pending_run,
    ready,
    research_run,
    triage_run,
    until,
    until_async,
)


def runs_screen(app: ViewerApp) -> RunsScreen:
    screen = app.screen
    assert isinstance(screen, RunsScreen), screen
    return screen


def transcript(app: ViewerApp) -> TranscriptScreen:
    screen = app.screen
    assert isinstance(screen, TranscriptScreen), screen
    return screen


def loaded(app: ViewerApp) -> bool:
    """The transcript's page and what frames it (the end line's text, a marker) are shown."""
    screen = app.screen
    return isinstance(screen, TranscriptScreen) and screen.slice is not None and screen.opened


def shows(app: ViewerApp, needle: str) -> bool:
    return loaded(app) and any(needle in t for t in transcript(app).view.line_texts())


def turns(n: int, first: int = 0) -> list[Entry]:
    """``n`` tool turns (two messages each: the call and its result)."""
    out = []
    for i in range(first, first + n):
        call = {"type": "tool_use", "id": f"c{i}", "name": "step", "input": f'{{"i":{i}}}'}
        out.append(Entry.assistant([call], stop_reason="tool_use", iteration=i + 1))
        out.append(Entry.tool_result(f"c{i}", f"output of step {i}"))
    return out


async def test_navigates_runs_transcript_and_details_and_quits(daemon: Daemon) -> None:
    research_run(daemon.target)
    triage_run(daemon.target)
    app = ViewerApp(Source(str(daemon.socket)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
        assert [r.info.run_id for r in runs_screen(app).shown] == ["demo-triage", "demo-research"]
        await pilot.press("down", "enter")
        await until(pilot, lambda: loaded(app), "the transcript")
        assert transcript(app).run_id == "demo-research"
        lines = transcript(app).view.line_texts()
        assert any("→ read_file" in t for t in lines)
        assert any("✗ error FAILED test_parser.py" in t for t in lines)
        assert lines[-1].startswith("── ended: completed")
        await pilot.press("d")
        await until(
            pilot,
            lambda: isinstance(app.screen, DetailsScreen) and app.screen.verified is not None,
            "details and verify",
        )
        details = app.screen
        assert isinstance(details, DetailsScreen)
        assert details.details is not None
        assert details.details.state.counters.input_tokens == 2000
        assert isinstance(details.verified, jc.VerifyResult)
        assert details.verified.records == 6
        await pilot.press("escape")
        assert isinstance(app.screen, TranscriptScreen)
        await pilot.press("escape")
        runs = runs_screen(app)
        await pilot.press("slash", *"status:suspended", "enter")
        await until(
            pilot, lambda: [r.info.run_id for r in runs.shown] == ["demo-triage"], "the filter"
        )
        await pilot.press("escape")
        await until(pilot, lambda: len(runs.shown) == 2, "the filter cleared")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the app to quit")


async def test_a_live_append_shows_at_the_bottom_and_never_moves_a_reader_scrolled_up(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("live", FP, "count to forty") as run:
        run.append_many(turns(20))
        app = ViewerApp(Source(str(daemon.socket)), "live")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: shows(app, "output of step 19"), "the last turn")
            view = transcript(app).view
            assert view.at_bottom
            run.append_many(turns(1, first=20))
            await until(pilot, lambda: shows(app, "output of step 20"), "the live append")
            assert view.at_bottom  # it followed
            assert "following" in str(app.screen.query_one("#head").render())
            await pilot.press("home")
            await until(pilot, lambda: view.scroll_y == 0, "the top")
            top = view.line_texts()[:3]
            run.append_many(turns(1, first=21))
            await until(pilot, lambda: shows(app, "output of step 21"), "the second append")
            assert view.scroll_y == 0
            assert view.line_texts()[:3] == top
            assert "paused" in str(app.screen.query_one("#head").render())
            await pilot.press("end")
            await until(pilot, lambda: view.at_bottom, "following again")


async def test_a_pending_turn_is_shown_apart_and_its_results_arrive_live(daemon: Daemon) -> None:
    writer = pending_run(daemon.target)
    try:
        app = ViewerApp(Source(str(daemon.socket)), "demo-pending")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: shows(app, "pending turn"), "the pending turn")
            screen = transcript(app)
            waiting = [e.tool_use_id for e in screen.view.entries if e.waiting]
            assert waiting == ["toolu_11", "toolu_13"]
            assert "2 calls waiting" in str(screen.query_one("#head").render())
            writer.result(12, "toolu_13", "storage/file.py:88: os.fsync(fd)")
            await until(pilot, lambda: shows(app, "os.fsync(fd)"), "the live result")
            waiting = [e.tool_use_id for e in screen.view.entries if e.waiting]
            assert waiting == ["toolu_11"]
            writer.result(13, "toolu_11", "class FileStore: ...")
            await until(pilot, lambda: not shows(app, "pending turn"), "the turn to commit")
            assert not any(e.waiting for e in screen.view.entries)
            calls = [e for e in screen.view.entries if e.kind == "call"]
            assert [e.tool_use_id for e in calls] == ["toolu_11", "toolu_12", "toolu_13"]
            assert all(e.result for e in calls)
    finally:
        writer.close()


async def test_a_stopped_daemon_shows_how_to_start_it_and_the_view_reconnects(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("survivor", FP, "keep going") as run:
        run.append_many(turns(2))
    app = ViewerApp(Source(str(daemon.socket)), "survivor", retry_first_s=0.1, retry_cap_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 1"), "the transcript")
        daemon.stop()  # SIGTERM to its pid
        await until(pilot, lambda: ready(app, NotRunningScreen, "#box", focus=False), "not running")
        box = str(app.screen.query_one("#box").render())
        assert "not running" in box
        assert "make run" in box
        assert str(daemon.socket) in box
        await until(pilot, lambda: app.screen.attempts >= 2, "a retry")  # type: ignore[attr-defined]
        daemon.start()  # the same socket and data dir
        await until(pilot, lambda: not app.offline and loaded(app), "the reconnect")
        with jc.connect(str(daemon.socket)) as jd, jd.resume("survivor", FP) as run:
            run.append_many(turns(1, first=2))
        await until(pilot, lambda: shows(app, "output of step 2"), "a live append after it")
        await pilot.press("escape")
        await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
        assert [r.info.run_id for r in runs_screen(app).rows] == ["survivor"]


async def test_a_long_run_opens_on_its_last_page_and_loads_earlier_pages_on_scroll_up(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("long", FP, "a long one") as run:
        for first in range(0, 1500, 500):
            run.append_many(turns(500, first=first))
    source = Source(str(daemon.socket), page=100)
    app = ViewerApp(source, "long")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 1499"), "the last page")
        screen = transcript(app)
        assert screen.slice is not None
        assert screen.slice.total == 3001
        assert source.stats.messages_fetched <= 101  # one page, not the run
        # the total, the last page (the runs table under it lists nothing while covered)
        assert source.stats.history_calls == 2
        assert screen.view.at_bottom
        start = screen.slice.start

        async def page_up() -> bool:
            await pilot.press("pageup")
            return screen.slice is not None and screen.slice.start < start

        await until_async(pilot, page_up, "paging")
        assert screen.slice.start >= start - 101
        assert source.stats.history_calls == 3
        assert shows(app, f"{screen.slice.start:,} earlier messages")


async def test_search_finds_text_in_pages_not_loaded_yet(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("hay", FP, "find the needle") as run:
        run.append_many(turns(3))
        run.assistant("the NEEDLE is here", stop_reason="end_turn")
        run.append_many(turns(60, first=3))
    app = ViewerApp(Source(str(daemon.socket), page=20), "hay")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 62"), "the last page")
        assert not shows(app, "NEEDLE")
        screen = transcript(app)
        await pilot.press("slash", *"nee", "escape")  # closes the box, stays on the run
        assert app.screen is screen
        assert not screen.query_one("#search").has_class("shown")
        await pilot.press("slash", "d", "l", "e", "enter")  # the box keeps "nee"
        await until(
            pilot,
            lambda: "NEEDLE" in screen.view.entries[screen.view.cursor].text,
            "the match in an earlier page",
        )
        assert screen.slice is not None
        assert screen.slice.start <= 7


async def test_details_take_export_fork_and_restore_a_checkpoint_after_confirming(
    daemon: Daemon, tmp_path: Path
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("ops", FP, "checkpoint me") as run:
            run.append_many(turns(2))
        app = ViewerApp(Source(str(daemon.socket)))
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
            await pilot.press("d")
            await until(pilot, lambda: _details(app) is not None, "details")
            screen = details_screen(app)

            await pilot.press("c")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the confirmation")
            await pilot.press(*"before-edit", "enter")
            await until(pilot, lambda: len(screen.checkpoints) == 1, "the new checkpoint")
            ckpt = screen.checkpoints[0]
            assert ckpt.label == "before-edit"
            with jd.resume("ops", FP) as run:
                run.append_many(turns(1, first=2))

            out = tmp_path / "ops.checkpoint"
            await pilot.press("e")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the export dialog")
            app.screen.query_one("#field").value = str(out)  # type: ignore[attr-defined]
            await pilot.click("#yes")
            await until(pilot, lambda: out.exists() and out.stat().st_size > 0, "the export")
            assert out.read_bytes() == jd.export_checkpoint("ops", ckpt.checkpoint_id)

            await pilot.press("f")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the fork dialog")
            await pilot.press(*"ops-fork", "enter")
            await until(pilot, lambda: _has_run(jd, "ops-fork"), "the fork")
            await until(pilot, lambda: screen.last_fork == "ops-fork", "the fork's notice")
            await pilot.press("o")  # opens the fork just made
            await until(pilot, lambda: loaded(app) and transcript(app).run_id == "ops-fork", "it")
            await pilot.press("escape")  # back to the runs: the details again
            await pilot.press("d")
            await until(pilot, lambda: _details(app) is not None, "details")
            screen = details_screen(app)
            await until(pilot, lambda: len(screen.checkpoints) == 1, "its checkpoint")

            before = jd.fold("ops").last_seq
            await pilot.press("r")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the restore dialog")
            await pilot.press("escape")  # no: nothing happens
            assert jd.fold("ops").last_seq == before
            await pilot.press("r")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the restore dialog")
            await pilot.click("#yes")
            await until(pilot, lambda: jd.fold("ops").last_seq > before, "the restore")
            assert list(jd.load("ops", before + 1))[-1].kind == "rebase"
            assert len(jd.fold("ops").messages) == ckpt.message_count


def details_screen(app: ViewerApp) -> DetailsScreen:
    screen = app.screen
    assert isinstance(screen, DetailsScreen), screen
    return screen


def _details(app: ViewerApp) -> Any:
    return app.screen.details if isinstance(app.screen, DetailsScreen) else None


def _has_run(jd: jc.Client, run_id: str) -> bool:
    return any(r.run_id == run_id for r in jd.list())


async def test_a_record_kind_the_viewer_does_not_know_is_one_dim_line(daemon: Daemon) -> None:
    # No daemon writes such a record yet (a framework-state kind is being added), so the
    # record is handed to the screen as the Watch would deliver it.
    with jc.connect(str(daemon.socket)) as jd, jd.start("kinds", FP, "state") as run:
        run.append_many(turns(1))
    app = ViewerApp(Source(str(daemon.socket)), "kinds")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 0"), "the transcript")
        raw = b'{"seq":4,"state":{"ns":"graph"},"type":"journald.v1.record.state","v":1}'
        rec = jc.JournalRecord(4, "", "2026-11-30T12:00:00Z", "", "", raw, None, {})
        transcript(app).on_record(rec)
        await until(
            pilot,
            lambda: shows(app, "· journald.v1.record.state record at seq 4"),
            "the dim line",
        )


def test_the_view_command_refuses_a_pipe_and_points_to_the_line_commands() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "journald.cli", "view"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "view needs a terminal" in proc.stderr
    assert "journald replay RUN" in proc.stderr


async def test_the_runs_table_shows_a_new_run_its_holder_and_pending_calls_while_open(
    daemon: Daemon,
) -> None:
    research_run(daemon.target)
    app = ViewerApp(Source(str(daemon.socket)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: runs_screen(app).loaded, "the runs table")
        writer = pending_run(daemon.target)
        try:
            await until(pilot, lambda: len(runs_screen(app).rows) == 2, "the new run in the table")
            row = runs_screen(app).shown[0]
            assert row.info.run_id == "demo-pending"
            assert row.info.holder is not None
            assert row.info.holder.name == "tester"
            assert row.pending_calls == 2
            writer.result(12, "toolu_13", "found")
            await until(
                pilot, lambda: runs_screen(app).shown[0].pending_calls == 1, "one call fewer"
            )
        finally:
            writer.close()
        await until(pilot, lambda: runs_screen(app).shown[0].info.holder is None, "the release")


async def test_a_restore_while_the_transcript_is_open_shows_the_restored_conversation(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("rewind", FP, "go back") as run:
            run.append_many(turns(3))
        ckpt = jd.checkpoint("rewind", "three turns")
        app = ViewerApp(Source(str(daemon.socket)), "rewind")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: shows(app, "output of step 2"), "the transcript")
            with jd.resume("rewind", FP) as run:
                run.append_many(turns(2, first=3))
            await until(pilot, lambda: shows(app, "output of step 4"), "the later turns")
            jd.restore("rewind", ckpt.checkpoint_id)
            await until(pilot, lambda: not shows(app, "output of step 4"), "the rewind")
            assert shows(app, "output of step 2")
            assert transcript(app).view.at_bottom
