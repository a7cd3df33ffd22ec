"""The transcript screen of one run: a window of a few pages of the conversation, opened on
the last page, moved to any place at the cost of one page, new records live.

The window: ``slice`` holds at most ``LOADED_MESSAGES`` messages (plus what arrives live)
from ``slice.start``; scrolling past either edge reads the next page that way and drops a
page at the far side, so a page back costs the same at the end and at the start of a long
run and memory is bounded by the window. Home/End and ``:`` (go to message N) replace the
window by one page where the reader goes.

Live: a Watch from the seq the loaded page reflects runs in a worker thread. While the window
reaches the end, each record marks the tail stale and one refresh at a time re-reads the
conversation from the last loaded turn (``Source.tail``), so a call's result shows under its
call as soon as it is journaled; elsewhere a record only updates the count in the header. A
rebase (restore, compaction) reloads the last page. Records of a kind the transcript does not
render become one dim line where they arrived. A checkpoint taken, deleted or evicted (an event
of the same Watch, not a record) reads the markers again.

Search reads the run by pages in a worker (nothing kept but the matches' places), so it finds
text anywhere in the run and counts the matches ("3 of 17").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import ClassVar

from journald_client import JournaldError, JournalRecord, NotFoundError, Watch
from journald_client.state import Message
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static

from journald.cli.replay import one_line
from journald.view import goto
from journald.view.base import Box, describe_error
from journald.view.data import OPEN_STATUSES, CheckpointMark, Opening, Slice
from journald.view.markers import fork_from, restore_to
from journald.view.model import Entry, build_entries, merge_notes, plural, unknown_record_entry
from journald.view.transcript import TranscriptView
from journald.view.transcript_search import SearchingScreen

LOADED_PAGES = 4  # the window holds about this many pages of messages
TOP_MARKER_KEY = (-3, 0)  # the rebase or fork the conversation starts from
CHECKPOINT_KEY = -(1 << 40)  # entry keys (n, CHECKPOINT_KEY + i): checkpoint i, before message n
WATCH_RETRY_S = 0.5  # a Watch ended while the run is still listed: read it again after this


class TranscriptScreen(SearchingScreen):
    DEFAULT_CSS = """
    TranscriptScreen #head { dock: top; height: 1; padding: 0 1; background: $panel; }
    TranscriptScreen Box { dock: bottom; height: 3; display: none; }
    TranscriptScreen Box.shown { display: block; }
    TranscriptScreen TranscriptView { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Runs"),
        Binding("d", "details", "Details"),
        Binding("slash", "search", "Search"),
        Binding("colon", "goto", "Go to", show=False),  # in ? (the footer keeps ? in 80)
        Binding("R", "records", "Records"),
        Binding("y", "copy", "Copy", show=False),
        Binding("f", "fork_here", "Fork from the marker", show=False),
        Binding("r", "restore_here", "Restore to the marker", show=False),
        Binding("n", "find(-1)", "Older match", show=False),
        Binding("N", "find(1)", "Newer match", show=False),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.bounds: list[int] = []  # the page starts inside the window (clean boundaries)
        self.ended = ""
        self.marker = ""  # the rebase or fork the conversation starts from
        self.marker_checkpoint = ""  # the checkpoint before that rebase (f and r act on it)
        self.checkpoint_marks: tuple[CheckpointMark, ...] = ()  # shown where each was taken
        self.opened = False  # the terminal's text and the marker have been read
        self.marking = False  # the markers are being read again (a checkpoint changed)
        self.marks_stale = False
        self.notes: list[Entry] = []  # dim lines for record kinds not rendered
        self.loading_earlier = False
        self.loading_later = False
        self.refreshing = False
        self.stale = False
        self.counting = False  # a header count is being read (away from the end)
        self.count_stale = False
        self.watch_handle: Watch | None = None
        self.watching_from = 0
        self.closing = False
        self.failed = ""
        self.copied = ""  # what y copied last (tests read it)

    def compose(self) -> ComposeResult:
        yield Static(Text(f"run {self.run_id} · loading…"), id="head")
        yield TranscriptView(id="transcript")
        yield Box(
            placeholder="search this run (enter: find older; empty: stop; escape: close)",
            id="search",
        )
        yield Box(placeholder=f"go to: {goto.HELP}", id="goto")
        yield Footer()

    def on_mount(self) -> None:
        self.view.focus()
        self.load()

    def on_unmount(self) -> None:
        self.closing = True
        self.search_stop.set()
        self._stop_watch()

    # --- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read the last page and the run's status, then follow it live."""

        def read() -> tuple[Slice, str]:
            info = self.source.info(self.run_id)
            status = info.status if info is not None else ""
            return self.source.tail(self.run_id), "" if status in OPEN_STATUSES else status

        self.fetch(read, self._loaded, group="tail", exclusive=True, failed=self._load_failed)

    def _load_failed(self, err: JournaldError) -> None:
        what = "not found" if isinstance(err, NotFoundError) else describe_error(err)
        self.failed = what
        self.query_one("#head", Static).update(Text(f"run {self.run_id} · {what}"))
        self.show_error(err)

    def _loaded(self, got: tuple[Slice, str]) -> None:
        self.slice, self.ended = got
        self.bounds = [self.slice.start]
        self.failed = ""
        self.view.expanded.clear()  # a reload may follow a rebase: indexes mean new messages
        self._redraw(follow=True)
        self._start_watch(self.slice.last_seq + 1)
        # the terminal's text and where the conversation came from take a Fold: after the
        # first paint, not before it
        self.fetch(lambda: self.source.opening(self.run_id), self._opened, group="opening")

    def _opened(self, opening: Opening) -> None:
        if self.slice is None:
            return
        if self.ended and opening.ended.startswith(self.ended):
            self.ended = opening.ended
        self.marker, self.marker_checkpoint = opening.marker, opening.checkpoint_id
        self.checkpoint_marks = opening.checkpoints
        self.opened = True
        self._redraw()

    def refresh_markers(self) -> None:
        """Read the markers again (a checkpoint was taken, deleted or evicted); one read at a
        time, a change meanwhile asks for one more."""
        if self.marking:
            self.marks_stale = True
            return
        self.marking, self.marks_stale = True, False

        def done(opening: Opening) -> None:
            self.marking = False
            self._opened(opening)
            if self.marks_stale:
                self.refresh_markers()

        def failed(err: JournaldError) -> None:
            self.marking = False
            self.show_error(err)

        self.fetch(lambda: self.source.opening(self.run_id), done, group="marks", failed=failed)

    def reconnected(self) -> None:
        self.marking = False  # a read the lost daemon never answered
        self._stop_watch()
        self.load()

    def _redraw(self, follow: bool | None = None) -> None:
        s = self.slice
        if s is None:
            return
        at_end = s.at_end
        entries = build_entries(
            s.messages, s.start, s.pending if at_end else None, ended=self.ended if at_end else ""
        )
        if not at_end:
            later = s.total - s.stop
            entries.append(
                Entry((1 << 61, 0), "gap", f"{plural(later, 'later message')} (scroll down, End)")
            )
        if self.marker and s.start == 0:
            entries.insert(0, Entry(TOP_MARKER_KEY, "marker", self.marker))
        marks = [
            Entry((m.messages, CHECKPOINT_KEY + i), "marker", m.text)
            for i, m in enumerate(self.checkpoint_marks)
        ]
        notes = [n for n in [*self.notes, *marks] if s.start <= n.key[0] <= s.stop]
        if notes:
            entries = merge_notes(entries, notes)
        self.view.set_entries(entries, follow=follow if at_end else False)
        self._update_head()

    def _update_head(self) -> None:
        s = self.slice
        if s is None:
            return
        if not s.at_end:
            where = f"at {s.start + 1:,}-{s.stop:,} (End: the end)"
        else:
            where = "following" if self.view.at_bottom else "paused (End: follow)"
        state = f"ended: {self.ended}" if self.ended and s.at_end else where
        pending = ""
        if s.pending is not None:
            pending = f" · {plural(len(s.pending.unanswered), 'call')} waiting"
        found = ""
        if self.search_text:
            more = "" if self.search_done else f"+ (searched {self.search_progress():.0%})"
            at = f"{self.match_at + 1} of " if self.match_at >= 0 else ""
            found = f" · {self.search_text!r}: {at}{len(self.matches)}{more}"
        self.query_one("#head", Static).update(
            Text(
                f"run {one_line(self.run_id)} · {plural(s.total, 'message')} · seq "
                f"{s.last_seq:,}{pending} · {state}{found}"
            )
        )

    def on_transcript_view_near_top(self, event: TranscriptView.NearTop) -> None:
        self.load_earlier()

    def on_transcript_view_near_bottom(self, event: TranscriptView.NearBottom) -> None:
        self.load_later()

    def load_earlier(self, then: Callable[[], None] | None = None) -> None:
        s = self.slice
        if s is None or s.start == 0 or self.loading_earlier:
            return
        self.loading_earlier = True
        before = s.start

        def done(got: tuple[list[Message], int]) -> None:
            self.loading_earlier = False
            msgs, start = got
            cur = self.slice
            if cur is None or cur.start != before:  # moved meanwhile
                return
            cur.messages[:0] = msgs
            cur.start = start
            self.bounds.insert(0, start)
            self._trim(keep_start=True)
            self._redraw(follow=False)
            if then is not None:
                then()

        self.fetch(lambda: self.source.earlier(self.run_id, before), done, group="earlier")

    def load_later(self) -> None:
        s = self.slice
        if s is None or s.at_end or self.loading_later:
            return
        self.loading_later = True
        after = s.stop

        def done(got: Slice) -> None:
            self.loading_later = False
            cur = self.slice
            if cur is None or cur.stop != after:
                return
            if got.start < cur.start:  # the run changed under the window
                self._show_window(got)
                return
            cur.messages[got.start - cur.start :] = got.messages
            cur.total, cur.last_seq, cur.pending = got.total, got.last_seq, got.pending
            self.bounds = [b for b in self.bounds if b < got.start] + [got.start]
            self._trim(keep_start=False)
            self._redraw(follow=False)

        self.fetch(lambda: self.source.at(self.run_id, after), done, group="later")

    def _trim(self, keep_start: bool) -> None:
        """Drop pages at the far side of the window once it holds more than it should."""
        s = self.slice
        if s is None:
            return
        most = LOADED_PAGES * self.source.page
        if keep_start:  # cut at the last page start that keeps at most ``most`` messages
            cut = next((b for b in reversed(self.bounds) if s.start < b <= s.start + most), None)
            if cut is not None and len(s.messages) > most:
                del s.messages[cut - s.start :]
                s.pending = None
                self.bounds = [b for b in self.bounds if b < cut]
        else:
            cut = next((b for b in self.bounds if s.start < b and s.stop - b <= most), None)
            if cut is not None and len(s.messages) > most:
                del s.messages[: cut - s.start]
                s.start = cut
                self.bounds = [b for b in self.bounds if b >= cut]

    def jump(self, offset: int, key: tuple[int, int] | None = None) -> None:
        """Replace the window by the page holding message ``offset`` and put the cursor
        there (on entry ``key`` if given)."""

        def done(got: Slice) -> None:
            self._show_window(got)
            self.view.go_to_message(offset, key)
            if key is not None:
                self.view.reveal(key)
            self._update_head()

        self.fetch(lambda: self.source.at(self.run_id, offset), done, group="jump", exclusive=True)

    def _show_window(self, got: Slice) -> None:
        self.slice = got
        self.bounds = [got.start]
        self._redraw(follow=False)

    def on_transcript_view_edge(self, event: TranscriptView.Edge) -> None:
        s = self.slice
        if s is None:
            return
        if event.start:
            if s.start == 0:
                self.view.go_first()
            else:
                self.jump(0)
        elif s.at_end:
            self.view.go_last()
        else:
            self.load()
        self._update_head()

    # --- live ------------------------------------------------------------------------------

    def _start_watch(self, from_seq: int) -> None:
        self._stop_watch()
        self.watching_from = from_seq
        app = self.viewer

        def follow() -> None:
            handle: Watch | None = None
            try:
                handle = self.source.watch(self.run_id, from_seq)
                self.watch_handle = handle
                for event in handle.events():
                    if isinstance(event, JournalRecord):
                        self._back(self.on_record, event)
                    else:  # a checkpoint taken or dropped: its marker follows
                        self._back(self.refresh_markers)
            except JournaldError:
                pass  # the check below tells a lost daemon from a deleted run
            if self.closing or handle is not self.watch_handle:
                return  # stopped on purpose (a reload starts another)
            gone = self.source.run_gone(self.run_id)
            if gone is None:
                self._back(app.daemon_lost)
            else:
                self._back(self.watch_ended, gone)

        self.run_worker(follow, thread=True, group="watch", exit_on_error=False)

    def _stop_watch(self) -> None:
        if self.watch_handle is not None:
            handle, self.watch_handle = self.watch_handle, None
            with contextlib.suppress(Exception):
                handle.cancel()

    def watch_ended(self, gone: bool) -> None:
        if self.closing or self.viewer.offline:
            return
        if not gone:  # the stream ended, the run is there (a daemon stopping?): look again
            self.set_timer(WATCH_RETRY_S, self.load)
            return
        self.notify(
            f"run {self.run_id} is no longer there (deleted?); esc goes back to the runs",
            severity="warning",
            markup=False,
        )

    def on_record(self, rec: JournalRecord) -> None:
        if self.slice is None:
            return
        if rec.kind == "rebase":
            self.notes.clear()
            if self.marking:  # read before the rebase: read the markers once more after it
                self.marks_stale = True
            self.load()
            return
        if rec.kind == "terminal":
            reason = str(rec.payload.get("reason", "ended"))
            message = str(rec.payload.get("message") or "")
            self.ended = f"{reason} · {message}" if message else reason
        elif rec.kind in ("assistant", "user", "tool_result"):
            self.ended = ""
        note = unknown_record_entry(rec, self.slice.stop)
        if note is not None:
            self.notes.append(note)
        if self.slice.at_end:
            self.refresh_tail()
        else:
            self.refresh_count()

    def refresh_count(self) -> None:
        """Away from the end: only the header's count and seq follow the run (one read at a
        time: records arriving meanwhile ask for one more)."""
        if self.counting:
            self.count_stale = True
            return
        self.counting, self.count_stale = True, False

        def done(head: Slice) -> None:
            self.counting = False
            cur = self.slice
            if cur is not None and not cur.at_end:
                cur.total, cur.last_seq = head.total, head.last_seq
                self._redraw(follow=False)
            if self.count_stale:
                self.refresh_count()

        def failed(err: JournaldError) -> None:
            self.counting = False
            self.show_error(err)

        self.fetch(lambda: self.source.head(self.run_id), done, group="count", failed=failed)

    def refresh_tail(self) -> None:
        """Re-read the conversation from the last loaded message on (one read at a time)."""
        s = self.slice
        if s is None:
            return
        if self.refreshing:
            self.stale = True
            return
        self.refreshing, self.stale = True, False
        from_offset = max(s.start, s.stop - 1)

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
            self.bounds = [b for b in self.bounds if b < got.start] + [got.start]
            if self.view.at_bottom:
                self._trim(keep_start=False)
            self._redraw()
            if self.stale:
                self.refresh_tail()

        self.fetch(lambda: self.source.tail(self.run_id, from_offset), done, group="refresh")

    # --- search and go to ------------------------------------------------------------------

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.add_class("shown")
        box.value = self.search_text
        box.focus()

    def action_goto(self) -> None:
        box = self.query_one("#goto", Input)
        box.add_class("shown")
        box.value = ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("shown")
        self.view.focus()
        if event.input.id == "goto":
            self._go_to(event.value.strip())
        elif event.input.id == "search":
            text = event.value.strip()
            if text != self.search_text or not self.search_done:
                self._start_search(text)
            if text:
                self.action_find(-1)

    def _go_to(self, text: str) -> None:
        s = self.slice
        try:
            target = goto.parse(text)
        except goto.NotATarget as err:
            self.notify(str(err), markup=False)
            return
        if target.kind != "message":
            self._seek(target)
            return
        n = target.number
        if s is None or not 1 <= n <= max(1, s.total):
            total = s.total if s is not None else 0
            self.notify(f"there is no message {n}: the run has {plural(total, 'message')}")
            return
        if s.start <= n - 1 < s.stop:
            self.view.go_to_message(n - 1)
        else:
            self.jump(n - 1)

    def _seek(self, target: goto.Target) -> None:
        """Seq N or time T: the daemon finds the message, one page read (not the pages
        before it)."""
        seq, when = (target.number, "") if target.kind == "seq" else (0, target.when)

        def done(got: tuple[Slice, int, int]) -> None:
            window, index, at_seq = got
            self._show_window(window)
            self.view.go_to_message(min(index, max(0, window.stop - 1)))
            self._update_head()
            said = f"the first record at or after {target.said} is seq {at_seq:,}; " if when else ""
            self.notify(f"{said}seq {at_seq:,} is in message {index + 1:,}", markup=False)

        self.fetch(
            lambda: self.source.seek(self.run_id, seq=seq, when=when),
            done,
            group="jump",
            exclusive=True,
        )

    # --- navigation ------------------------------------------------------------------------

    def action_back(self) -> None:
        self.viewer.pop_to_runs()

    def action_details(self) -> None:
        self.viewer.open_details(self.run_id)

    def action_records(self) -> None:
        from journald.view.records import RecordsScreen

        self.app.push_screen(RecordsScreen(self.run_id))

    def _marker_checkpoint(self) -> str:
        """The checkpoint of the marker under the cursor ("" with a notice if there is none)."""
        v = self.view
        on_marker = (
            bool(v.entries) and v.entries[min(v.cursor, len(v.entries) - 1)].kind == "marker"
        )
        if on_marker:
            e = v.entries[min(v.cursor, len(v.entries) - 1)]
            i = e.key[1] - CHECKPOINT_KEY
            if 0 <= i < len(self.checkpoint_marks):  # a checkpoint's own marker
                return self.checkpoint_marks[i].checkpoint_id
            if e.key == TOP_MARKER_KEY and self.marker_checkpoint:  # the rebase's marker
                return self.marker_checkpoint
        self.notify(
            "put the cursor on a checkpoint, compaction or restore marker first (Home: the top)"
        )
        return ""

    def action_fork_here(self) -> None:
        cp = self._marker_checkpoint()
        if cp:
            fork_from(self, cp)

    def action_restore_here(self) -> None:
        cp = self._marker_checkpoint()
        if cp:
            restore_to(self, cp)

    def action_copy(self) -> None:
        """The entry under the cursor (a call with its result) as text."""
        v = self.view
        if not v.entries:
            return
        e = v.entries[min(v.cursor, len(v.entries) - 1)]
        parts = [f"{e.tool_name} [{e.tool_use_id}] {e.text}" if e.tool_name else e.text]
        if e.result is not None:
            parts.append(e.result)
        self.copied = "\n".join(parts)
        self.app.copy_to_clipboard(self.copied)
        self.notify(f"copied {len(self.copied):,} characters", markup=False)

    def on_transcript_view_moved(self, event: TranscriptView.Moved) -> None:
        self._update_head()
