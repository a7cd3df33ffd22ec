"""The transcript screen of one run: the last page first, earlier pages on scroll-up, new
records live.

Live: a Watch from the seq the loaded page reflects runs in a worker thread. Each record
marks the tail stale; one refresh at a time re-reads the conversation from the last loaded
turn (``Source.tail``), so a call's result shows under its call as soon as it is journaled,
and the open turn is redrawn with its calls still waiting. A rebase (restore, compaction)
reloads the last page. Records of a kind the transcript does not render become one dim line
where they arrived.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from journald_client import JournaldError, JournalRecord, Watch
from journald_client.state import Message
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static

from journald.replay import one_line
from journald.view.base import DaemonScreen
from journald.view.data import OPEN_STATUSES, Slice
from journald.view.model import Entry, build_entries, unknown_record_entry
from journald.view.transcript import TranscriptView

SEARCH_PAGES = 20  # earlier pages one search step may load before it asks to go on


class SearchBox(Input):
    """The search field; escape closes it (and leaves the transcript where it was)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", show=False)]

    def action_close(self) -> None:
        self.remove_class("shown")
        self.screen.query_one(TranscriptView).focus()


class TranscriptScreen(DaemonScreen):
    DEFAULT_CSS = """
    TranscriptScreen #head { dock: top; height: 1; padding: 0 1; background: $panel; }
    TranscriptScreen #search { dock: bottom; height: 3; display: none; }
    TranscriptScreen #search.shown { display: block; }
    TranscriptScreen TranscriptView { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Runs"),
        Binding("d", "details", "Details"),
        Binding("slash", "search", "Search"),
        Binding("n", "find(-1)", "Older match", show=False),
        Binding("N", "find(1)", "Newer match", show=False),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.slice: Slice | None = None
        self.ended = ""
        self.notes: list[Entry] = []  # dim lines for record kinds not rendered
        self.loading_earlier = False
        self.refreshing = False
        self.stale = False
        self.watch_handle: Watch | None = None
        self.watching_from = 0
        self.closing = False
        self.search_text = ""

    def compose(self) -> ComposeResult:
        yield Static(f"run {self.run_id} · loading…", id="head")
        yield TranscriptView(id="transcript")
        yield SearchBox(
            placeholder="search this run (enter: find older, escape: close)", id="search"
        )
        yield Footer()

    @property
    def view(self) -> TranscriptView:
        return self.query_one(TranscriptView)

    def on_mount(self) -> None:
        self.view.focus()
        self.load()

    def on_unmount(self) -> None:
        self.closing = True
        self._stop_watch()

    # --- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read the last page and the run's status, then follow it live."""

        def read() -> tuple[Slice, str]:
            info = self.source.info(self.run_id)
            got = self.source.tail(self.run_id)
            status = info.status if info is not None else ""
            return got, ("" if status in OPEN_STATUSES else status)

        self.fetch(read, self._loaded, group="tail", exclusive=True)

    def _loaded(self, got: tuple[Slice, str]) -> None:
        self.slice, self.ended = got
        self.view.expanded.clear()  # a reload may follow a rebase: indexes mean new messages
        self._redraw(follow=True)
        self._start_watch(self.slice.last_seq + 1)

    def reconnected(self) -> None:
        self._stop_watch()
        self.load()

    def _redraw(self, follow: bool | None = None) -> None:
        s = self.slice
        if s is None:
            return
        entries = build_entries(s.messages, s.start, s.pending, ended=self.ended)
        if self.notes:
            entries = _merge_notes(entries, self.notes)
        self.view.set_entries(entries, follow=follow)
        self._update_head()

    def _update_head(self) -> None:
        s = self.slice
        if s is None:
            return
        where = "following" if self.view.at_bottom else "paused (end: follow)"
        state = f"ended: {self.ended}" if self.ended else where
        pending = ""
        if s.pending is not None:
            n = len(s.pending.unanswered)
            pending = f" · {n} call{'s' if n != 1 else ''} waiting"
        self.query_one("#head", Static).update(
            f"run {one_line(self.run_id)} · {s.total:,} messages · seq {s.last_seq:,}"
            f"{pending} · {state}"
        )

    def on_transcript_view_near_top(self, event: TranscriptView.NearTop) -> None:
        self.load_earlier()

    def load_earlier(self, then: Any = None) -> None:
        s = self.slice
        if s is None or s.start == 0 or self.loading_earlier:
            return
        self.loading_earlier = True
        before = s.start

        def done(got: tuple[list[Message], int]) -> None:
            self.loading_earlier = False
            msgs, start = got
            cur = self.slice
            if cur is None or cur.start != before:  # reloaded meanwhile
                return
            cur.messages[:0] = msgs
            cur.start = start
            self._redraw(follow=False)
            if then is not None:
                then()

        self.fetch(lambda: self.source.earlier(self.run_id, before), done, group="earlier")

    # --- live ------------------------------------------------------------------------------

    def _start_watch(self, from_seq: int) -> None:
        self._stop_watch()
        self.watching_from = from_seq
        app = self.viewer

        def follow() -> None:
            try:
                handle = self.source.watch(self.run_id, from_seq)
                self.watch_handle = handle
                for rec in handle:
                    self._back(self.on_record, rec)
            except JournaldError:
                pass  # the check below tells a lost daemon from a deleted run
            if not self.closing:
                alive = self.source.ping()
                self._back(self.watch_ended if alive else app.daemon_lost)

        self.run_worker(follow, thread=True, group="watch", exit_on_error=False)

    def _stop_watch(self) -> None:
        if self.watch_handle is not None:
            with contextlib.suppress(Exception):
                self.watch_handle.cancel()
            self.watch_handle = None

    def watch_ended(self) -> None:
        if self.closing or self.viewer.offline:
            return
        self.notify(
            f"run {self.run_id} is no longer there (deleted?); esc goes back to the runs",
            severity="warning",
        )

    def on_record(self, rec: JournalRecord) -> None:
        if self.slice is None:
            return
        if rec.kind == "rebase":
            self.notes.clear()
            self.load()
            return
        if rec.kind == "terminal":
            self.ended = str(rec.payload.get("reason", "ended"))
        elif rec.kind in ("assistant", "user", "tool_result"):
            self.ended = ""
        note = unknown_record_entry(rec, self.slice.start + len(self.slice.messages))
        if note is not None:
            self.notes.append(note)
        self.refresh_tail()

    def refresh_tail(self) -> None:
        """Re-read the conversation from the last loaded message on (one read at a time)."""
        s = self.slice
        if s is None:
            return
        if self.refreshing:
            self.stale = True
            return
        self.refreshing, self.stale = True, False
        from_offset = max(s.start, s.start + len(s.messages) - 1)

        def done(got: Slice) -> None:
            self.refreshing = False
            cur = self.slice
            if cur is None or cur.start != s.start:
                return
            if got.start < cur.start or got.total < cur.start:  # rewritten under us
                self.load()
                return
            cur.messages[got.start - cur.start :] = got.messages
            cur.total, cur.last_seq, cur.pending = got.total, got.last_seq, got.pending
            self._redraw()
            if self.stale:
                self.refresh_tail()

        self.fetch(lambda: self.source.tail(self.run_id, from_offset), done, group="refresh")

    # --- search ----------------------------------------------------------------------------

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.add_class("shown")
        box.value = self.search_text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "search":
            return
        self.search_text = event.value.strip()
        event.input.remove_class("shown")
        self.view.focus()
        self.action_find(-1)

    def action_find(self, step: int, pages_left: int = SEARCH_PAGES) -> None:
        if not self.search_text:
            self.action_search()
            return
        if self.view.search(self.search_text, step):
            return
        s = self.slice
        if step < 0 and s is not None and s.start > 0:
            if pages_left <= 0:
                self.notify(f"no match in the last {s.total - s.start:,} messages; n: go on")
                return
            oldest = next((e.key for e in self.view.entries if e.kind != "gap"), None)

            def again() -> None:  # go on from the oldest entry that was loaded before
                keys = {e.key: i for i, e in enumerate(self.view.entries)}
                self.view.cursor = keys.get(oldest, 0) if oldest is not None else 0
                self.action_find(step, pages_left - 1)

            self.load_earlier(then=again)
            return
        self.notify(f"no {'older' if step < 0 else 'newer'} match for {self.search_text!r}")

    # --- navigation ------------------------------------------------------------------------

    def action_back(self) -> None:
        self.viewer.pop_to_runs()

    def action_details(self) -> None:
        self.viewer.open_details(self.run_id)

    def on_transcript_view_moved(self, event: TranscriptView.Moved) -> None:
        self._update_head()


def _merge_notes(entries: list[Entry], notes: list[Entry]) -> list[Entry]:
    """Put each note after the last entry of the message it arrived after."""
    out: list[Entry] = []
    pending_notes = sorted(notes, key=lambda n: n.key)
    for e in entries:
        while pending_notes and e.key[0] >= 0 and pending_notes[0].key[0] <= e.key[0]:
            out.append(pending_notes.pop(0))
        out.append(e)
    end = [e for e in out if e.kind == "end"]
    body = [e for e in out if e.kind != "end"]
    return body + pending_notes + end
