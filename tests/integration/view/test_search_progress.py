"""Search reads the run by pages with its progress in the header, and an empty search stops it
(issue 28 Build: "search with a match count ... by pages (bounded memory, cancellable,
progress shown)")."""

from __future__ import annotations

import threading
from collections.abc import Callable

import journald_client as jc
import pytest

from journald.view import data
from journald.view.app import ViewerApp
from journald.view.data import Source
from journald.view.model import Entry
from tests.daemon import Daemon
from tests.integration.view.test_view_app import shows, transcript, turns
from tests.integration.view_runs import FP, until

PAGE = 100  # messages per search page here; the run has 4 of them


class GatedSource(Source):
    """A search that reads its next page only when the test lets it."""

    def __init__(self, socket: str) -> None:
        super().__init__(socket, page=50)
        self.gate = threading.Semaphore(0)
        self.pages_read = 0
        self.finished = threading.Event()  # the search's worker has returned

    def search(
        self, run_id: str, query: str, found: Callable[[list[Entry], int, int], bool]
    ) -> None:
        def gated(hits: list[Entry], done: int, total: int) -> bool:
            self.pages_read += 1
            if not self.gate.acquire(timeout=30):
                return False
            return found(hits, done, total)

        try:
            super().search(run_id, query, gated)
        finally:
            self.finished.set()


def head(app: ViewerApp) -> str:
    return str(transcript(app).query_one("#head").render())


async def test_search_shows_how_far_it_has_read_and_an_empty_search_stops_it(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "SEARCH_PAGE_MESSAGES", PAGE)
    with jc.connect(str(daemon.socket)) as jd, jd.start("paged", FP, "look for step") as run:
        run.append_many(turns(200))  # 401 messages: "step" is in every call
    source = GatedSource(str(daemon.socket))
    app = ViewerApp(source, "paged")
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: shows(app, "output of step 199"), "the last page")
        await pilot.press("slash", *"output of step 1", "enter")
        await until(pilot, lambda: source.pages_read == 1, "the first search page read")
        source.gate.release()
        await until(pilot, lambda: "(searched 25%)" in head(app), "a quarter searched")
        assert "'output of step 1': " in head(app)
        await until(pilot, lambda: source.pages_read == 2, "the second page read")
        source.gate.release()
        await until(pilot, lambda: "(searched 50%)" in head(app), "half searched")

        await pilot.press("slash")
        await until(pilot, lambda: transcript(app).query_one("#search").has_focus, "the box")
        await pilot.press("ctrl+u", "enter")  # an empty search: stop and clear
        await until(pilot, lambda: "searched" not in head(app), "the search cleared")
        await until(pilot, lambda: source.pages_read == 3, "the page under way")
        source.gate.release()  # that page is not followed by another
        screen = transcript(app)
        await until(pilot, source.finished.is_set, "the search to return")
        assert source.pages_read == 3
        assert screen.matches == []
