"""The records screen (the journal as stored, with a timeline and the raw record), the
actions of the runs table (copy a run id, delete a run after a confirmation) and of a
compaction marker (fork from, or restore, the checkpoint before it)."""

from __future__ import annotations

import journald_client as jc
from textual.widgets import DataTable

from journald.view.app import ViewerApp
from journald.view.data import Source
from journald.view.details import Confirm
from journald.view.records import RecordsScreen
from journald.view.runs import RunsScreen
from journald.view.transcript_screen import TranscriptScreen
from tests.daemon import Daemon
from tests.integration.view.test_view_app import loaded, runs_screen, shows, transcript, turns
from tests.integration.view_runs import FP, ready, research_run, until


def records_screen(app: ViewerApp) -> RecordsScreen:
    screen = app.screen
    assert isinstance(screen, RecordsScreen), screen
    return screen


def on_marker(screen: TranscriptScreen) -> bool:
    v = screen.view
    return bool(v.entries) and v.entries[v.cursor].kind == "marker"


def row_texts(screen: RecordsScreen) -> list[str]:
    table = screen.query_one(DataTable)
    return [" ".join(str(c) for c in table.get_row_at(r)) for r in range(table.row_count)]


async def test_the_records_screen_shows_a_timeline_the_raw_record_and_copies_it(
    daemon: Daemon,
) -> None:
    research_run(daemon.target)  # records at 12:00:02 .. 12:00:06, one result after 1 s
    with jc.connect(str(daemon.socket)) as jd:
        stored = list(jd.load("demo-research"))
    app = ViewerApp(Source(str(daemon.socket), page=4), "demo-research")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: loaded(app), "the transcript")
        await pilot.press("R")
        await until(
            pilot,
            lambda: isinstance(app.screen, RecordsScreen) and bool(app.screen.records),
            "the records",
        )
        screen = records_screen(app)
        assert [r.seq for r in screen.records] == [3, 4, 5, 6]  # the last page of 4
        assert "seq 3-6 of 6" in str(screen.query_one("#head").render())
        rows = row_texts(screen)
        assert "result after 1.0s" in rows[0]  # toolu_01: called at :02, answered at :03
        assert "+1.0s" in rows[1].replace(" ", "")
        assert "tokens in 800 out 200" in rows[2]
        assert "terminal" in rows[3]
        raw = str(screen.query_one("#raw").render())
        assert stored[-1].hash in raw  # the cursor starts on the last record
        assert '"reason": "completed"' in raw

        await pilot.press("y")
        assert screen.copied == stored[-1].canonical.decode()

        await pilot.press("pageup")
        await until(pilot, lambda: screen.records[0].seq == 1, "the earlier page")
        rows = row_texts(screen)
        assert "meta" in rows[0]
        assert "tokens in 1200 out 300" in rows[1]
        await pilot.press("G")
        await until(pilot, lambda: screen.records[-1].seq == 6, "the last page again")
        await pilot.press("colon", "2", "enter")
        await until(pilot, lambda: screen.records[0].seq == 2, "seq 2 first")
        assert [r.seq for r in screen.records] == [2, 3, 4, 5]


async def test_the_runs_table_copies_a_run_id_and_deletes_a_run_after_confirming(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        for run_id in ("keep-me", "drop-me"):
            with jd.start(run_id, FP, "x") as run:
                run.assistant("y", stop_reason="end_turn")
        app = ViewerApp(Source(str(daemon.socket)))
        async with app.run_test(size=(100, 24)) as pilot:
            screen = runs_screen(app)
            await until(pilot, lambda: len(screen.shown) == 2, "the runs")
            at = [r.info.run_id for r in screen.shown].index("drop-me")
            screen.query_one(DataTable).move_cursor(row=at)
            await pilot.press("y")
            assert screen.copied == "drop-me"

            await pilot.press("x")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the confirmation")
            await pilot.press("escape")  # no: nothing happens
            await until(pilot, lambda: app.screen is screen, "the runs again")
            assert {r.run_id for r in jd.list()} == {"keep-me", "drop-me"}

            await pilot.press("x")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the confirmation")
            await pilot.click("#yes")
            await until(pilot, lambda: [r.info.run_id for r in screen.shown] == ["keep-me"], "gone")
            assert [r.run_id for r in jd.list()] == ["keep-me"]


async def test_a_compaction_marker_forks_or_restores_from_before_it_after_confirming(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("squashed", FP, "compact me") as run:
            run.append_many(turns(6))
        before = len(jd.fold("squashed").messages)
        assert jd.compact("squashed", "SUMMARY: six steps ran", keep_last=2).compacted
        app = ViewerApp(Source(str(daemon.socket)), "squashed")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: shows(app, "compaction at seq"), "the marker")
            screen = transcript(app)
            await pilot.press("home")
            await until(
                pilot, lambda: screen.view.entries[screen.view.cursor].kind == "marker", "on it"
            )

            await pilot.press("f")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the fork dialog")
            await pilot.press(*"unsquashed", "enter")
            await until(
                pilot, lambda: loaded(app) and transcript(app).run_id == "unsquashed", "the fork"
            )
            assert len(jd.fold("unsquashed").messages) == before
            await pilot.press("escape")
            app.push_screen(TranscriptScreen("squashed"))
            await until(pilot, lambda: shows(app, "compaction at seq"), "the marker again")
            screen = transcript(app)
            await pilot.press("home")
            await until(
                pilot, lambda: screen.view.entries[screen.view.cursor].kind == "marker", "on it"
            )

            await pilot.press("r")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the restore dialog")
            await pilot.click("#yes")
            await until(pilot, lambda: len(jd.fold("squashed").messages) == before, "the restore")
            await until(pilot, lambda: shows(app, "restore at seq"), "the restore marker")


async def test_a_checkpoint_shows_where_it_was_taken_and_forks_or_restores_from_there(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("marked", FP, "checkpoint me") as run:
            run.append_many(turns(3))
            cp = run.checkpoint("after three")
            run.append_many(turns(2, first=3))
        at = len(jd.fold("marked").messages)
        assert cp.message_count == at - 4
        app = ViewerApp(Source(str(daemon.socket)), "marked")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: shows(app, f"checkpoint {cp.checkpoint_id}"), "the mark")
            screen = transcript(app)
            entries = screen.view.entries
            mark = next(i for i, e in enumerate(entries) if e.kind == "marker")
            # between the third turn's result and the fourth turn's call
            assert "output of step 2" in (entries[mark - 1].result or "")
            assert "'after three'" in entries[mark].text
            assert '"i":3' in entries[mark + 1].text

            screen.view.cursor = mark
            await pilot.press("f")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the fork dialog")
            await pilot.press(*"from-three", "enter")
            await until(
                pilot, lambda: loaded(app) and transcript(app).run_id == "from-three", "the fork"
            )
            assert len(jd.fold("from-three").messages) == cp.message_count

            # the runs table opens the fork just made (o)
            app.pop_to_runs()
            await until(pilot, lambda: ready(app, RunsScreen, "RunsTable"), "the runs")
            await until(pilot, lambda: runs_screen(app).loaded, "the runs listed")
            await pilot.press("o")
            await until(
                pilot, lambda: loaded(app) and transcript(app).run_id == "from-three", "reopened"
            )

            await pilot.press("escape")
            app.push_screen(TranscriptScreen("marked"))
            await until(pilot, lambda: shows(app, f"checkpoint {cp.checkpoint_id}"), "again")
            screen = transcript(app)
            screen.view.cursor = next(
                i for i, e in enumerate(screen.view.entries) if e.kind == "marker"
            )
            await pilot.press("r")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the restore dialog")
            await pilot.click("#yes")
            await until(
                pilot, lambda: len(jd.fold("marked").messages) == cp.message_count, "the restore"
            )


async def test_a_checkpoint_taken_or_deleted_while_the_transcript_is_open_shows_without_reopening(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("live-marks", FP, "checkpoint me while I am read") as run:
            run.append_many(turns(3))
        app = ViewerApp(Source(str(daemon.socket)), "live-marks")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: shows(app, "output of step 2"), "the transcript")
            with jd.resume("live-marks", FP) as run:  # the Watch is live once this shows
                run.append_many(turns(1, first=3))
            await until(pilot, lambda: shows(app, "output of step 3"), "the later turn")
            screen = transcript(app)
            cp = jd.checkpoint("live-marks", "taken live")
            await until(pilot, lambda: shows(app, f"checkpoint {cp.checkpoint_id}"), "the mark")
            assert screen is transcript(app)  # the same screen: nothing was reopened
            assert any("'taken live'" in t for t in screen.view.line_texts())
            assert screen.view.at_bottom  # the reader still follows the end

            assert jd.delete_checkpoint("live-marks", cp.checkpoint_id)
            await until(
                pilot, lambda: not shows(app, f"checkpoint {cp.checkpoint_id}"), "the mark gone"
            )
