"""The records screen says its zone and how long ago things happened (issue 28 Build:
"relative times ("3m ago") with the zone shown")."""

from __future__ import annotations

from datetime import datetime

from journald.view.app import ViewerApp
from journald.view.data import Source
from journald.view.records import RecordsScreen
from journald.view.runs import zone_name
from tests.daemon import Daemon
from tests.integration.view.test_view_app import loaded
from tests.integration.view_runs import research_run, until


async def test_the_records_screen_shows_its_zone_and_how_long_ago_each_record_was(
    daemon: Daemon,
) -> None:
    research_run(daemon.target)  # its last record (the terminal) is at 2026-11-30T12:00:06Z
    last_s = datetime.fromisoformat("2026-11-30T12:00:06+00:00").timestamp()
    app = ViewerApp(Source(str(daemon.socket), page=4), "demo-research", clock=lambda: last_s + 180)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: loaded(app), "the transcript")
        await pilot.press("R")
        await until(
            pilot,
            lambda: isinstance(app.screen, RecordsScreen) and bool(app.screen.records),
            "the records",
        )
        screen = app.screen
        head = str(screen.query_one("#head").render())
        assert f"times {zone_name()}" in head
        assert "last record 3m ago" in head
        raw = str(screen.query_one("#raw").render())
        assert zone_name() in raw  # the cursor's record, in the local zone, named
        assert "3m ago" in raw
