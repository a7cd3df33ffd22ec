"""``journald view`` against a daemon on the JetStream backend (a real nats-server): the go-to
prompt's seq and time forms (History ``at_seq``/``at_time`` read the stream's records and the
fold marks in the run's bucket), the runs table's delete and a checkpoint's marker shown live
(issue 28 Build: "keep ``journald view`` working against the JetStream backend")."""

from __future__ import annotations

import os
from pathlib import Path

import journald_client as jc

from journald.view.app import ViewerApp
from journald.view.data import Source
from journald.view.details import Confirm
from tests.daemon import Daemon
from tests.integration.view.test_view_app import runs_screen, shows, transcript, turns
from tests.integration.view_runs import FP, ready, until
from tests.storage.backend_jetstream import fresh_stream


def cursor_text(app: ViewerApp) -> str:
    v = transcript(app).view
    return v.entries[v.cursor].haystack()


async def test_go_to_seq_and_time_and_delete_work_on_the_jetstream_backend(
    tmp_path: Path,
) -> None:
    url, stream, _ = await fresh_stream()
    sock = Path(f"/tmp/jd-vjs-{os.getpid()}-{stream}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", stream, socket=sock) as d,
        jc.connect(str(d.socket)) as jd,
    ):
        with jd.start("js-long", FP, "on the stream") as run:
            run.append_many(turns(150))
        with jd.start("js-spare", FP, "delete me") as run:
            run.append_many(turns(1))
        source = Source(str(d.socket), page=50)
        app = ViewerApp(source, "js-long")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: shows(app, "output of step 149"), "the last page")
            calls = source.stats.history_calls
            await pilot.press("colon", *"s 101", "enter")  # seq 101 = 3 + 2*49: step 49's result
            await until(
                pilot,
                lambda: cursor_text(app).endswith("\nc49\noutput of step 49"),
                "step 49 under the cursor",
            )
            assert source.stats.history_calls - calls <= 2
            await pilot.press("colon", *"t 1h ago", "enter")  # before every record: the first
            await until(pilot, lambda: transcript(app).view.cursor == 0, "the first message")
            assert shows(app, "on the stream")

            await pilot.press("escape")
            screen = runs_screen(app)
            await until(pilot, lambda: screen.loaded and len(screen.rows) == 2, "the runs")
            ids = [r.info.run_id for r in screen.shown]
            screen.table.move_cursor(row=ids.index("js-spare"))
            await pilot.press("x")
            await until(pilot, lambda: ready(app, Confirm, "#yes"), "the confirmation")
            await pilot.click("#yes")
            await until(pilot, lambda: [r.info.run_id for r in screen.rows] == ["js-long"], "gone")
        assert [r.run_id for r in jd.list()] == ["js-long"]


async def test_a_checkpoint_taken_while_the_transcript_is_open_shows_on_the_jetstream_backend(
    tmp_path: Path,
) -> None:
    # the Watch on JetStream sends checkpoint events too (from the checkpoint bucket's meta
    # subjects as well as the daemon's own hub): the marker follows without reopening
    url, stream, _ = await fresh_stream()
    sock = Path(f"/tmp/jd-vjs-{os.getpid()}-{stream}/s")
    with (
        Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", stream, socket=sock) as d,
        jc.connect(str(d.socket)) as jd,
    ):
        with jd.start("js-marks", FP, "mark me") as run:
            run.append_many(turns(2))
        app = ViewerApp(Source(str(d.socket)), "js-marks")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: shows(app, "output of step 1"), "the transcript")
            with jd.resume("js-marks", FP) as run:  # the Watch is live once this shows
                run.append_many(turns(1, first=2))
            await until(pilot, lambda: shows(app, "output of step 2"), "the later turn")
            cp = jd.checkpoint("js-marks", "on the stream")
            await until(pilot, lambda: shows(app, f"checkpoint {cp.checkpoint_id}"), "the mark")
