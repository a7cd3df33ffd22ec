"""Search in the transcript screen: the run read by pages in a worker from the end back
(nothing kept but the matches' places), so it finds text anywhere in the run, counts the
matches ("3 of 17"), says how far it has read, and stops when another search (an empty one
too) starts or the screen closes."""

from __future__ import annotations

import threading
from bisect import bisect_left

from journald.view.base import DaemonScreen
from journald.view.data import Slice
from journald.view.model import Entry
from journald.view.transcript import TranscriptView


class SearchingScreen(DaemonScreen):
    """A screen of one run's transcript that searches it (``TranscriptScreen``)."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.slice: Slice | None = None
        self.search_text = ""
        self.matches: list[tuple[int, int]] = []  # keys of the entries holding search_text
        self.search_done = False
        self.search_stop = threading.Event()
        self.match_at = -1  # index in matches of the entry the cursor went to
        self.scanned_from = 1 << 62  # the search has read the messages from this one on
        self.search_total = 0  # of the run's messages when the search began
        self.wanted_step = 0  # a find waiting for the search to reach further

    @property
    def view(self) -> TranscriptView:
        return self.query_one(TranscriptView)

    def jump(self, offset: int, key: tuple[int, int] | None = None) -> None:
        raise NotImplementedError  # the transcript screen moves its window

    def _update_head(self) -> None:
        raise NotImplementedError

    def action_search(self) -> None:
        raise NotImplementedError

    def _start_search(self, text: str) -> None:
        self.search_stop.set()
        stop = self.search_stop = threading.Event()
        self.search_text, self.matches, self.search_done, self.match_at = text, [], False, -1
        self.scanned_from, self.search_total = 1 << 62, 0
        self.view.search_query = text
        if not text:  # an empty search stops the one running and clears its marks
            self._update_head()
            return

        def found(hits: list[Entry], done: int, total: int) -> bool:
            if not stop.is_set():
                self._back(self._found, stop, [h.key for h in hits], done, total)
            return not stop.is_set()

        def scan() -> None:
            try:
                self.source.search(self.run_id, text, found)
            finally:
                self._back(self._scan_done, stop)

        self.run_worker(scan, thread=True, group="search", exit_on_error=False)

    def _found(
        self, stop: threading.Event, keys: list[tuple[int, int]], done: int, total: int
    ) -> None:
        if stop is not self.search_stop:
            return
        self.matches = sorted({*self.matches, *keys})
        self.scanned_from, self.search_total = done, total
        if self.wanted_step:
            step, self.wanted_step = self.wanted_step, 0
            self.action_find(step)
        self._update_head()

    def _scan_done(self, stop: threading.Event) -> None:
        if stop is not self.search_stop:
            return
        self.search_done = True
        if self.wanted_step:
            step, self.wanted_step = self.wanted_step, 0
            self.action_find(step)
        self._update_head()

    def search_progress(self) -> float:
        """How much of the run the search has read (it reads from the end back)."""
        total = self.search_total
        if self.search_done or total <= 0:
            return 1.0
        return max(0.0, min(1.0, (total - min(self.scanned_from, total)) / total))

    def _cursor_key(self) -> tuple[int, int]:
        v, s = self.view, self.slice
        if not v.entries or s is None:
            return (0, 0)
        e = v.entries[min(v.cursor, len(v.entries) - 1)]
        if e.kind == "gap":
            return (s.start, -1) if e.key[0] < 0 else (s.stop, 0)
        if e.key[0] < 0:  # the open turn: after every committed message
            return (s.total, 0)
        return e.key

    def action_find(self, step: int) -> None:
        if not self.search_text:
            self.action_search()
            return
        here = self._cursor_key()
        i = bisect_left(self.matches, here)
        if step < 0:
            at = i - 1
        else:
            at = i + 1 if i < len(self.matches) and self.matches[i] == here else i
        # the search reads from the end back: every match after what it has read is known,
        # so an older match found is the nearest one, and a newer one is once the search has
        # read back past the cursor
        sure = self.search_done or step < 0 or self.scanned_from <= here[0]
        if not sure or not 0 <= at < len(self.matches):
            if self.search_done:
                way = "older" if step < 0 else "newer"
                self.notify(f"no {way} match for {self.search_text!r}", markup=False)
            else:
                self.wanted_step = step  # retried as the search finds more
            return
        self.match_at = at
        key = self.matches[at]
        s = self.slice
        if s is not None and s.start <= key[0] < s.stop:
            self.view.reveal(key)
        else:
            self.jump(key[0], key)
        self._update_head()
