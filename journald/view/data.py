"""The viewer's only door to the daemon: every read and action goes through the Python client.

Calls block (gRPC), so the screens run them in worker threads. A call that finds no daemon
raises ``journald_client.DaemonUnavailable``; the app then shows its "not running" screen and
polls ``ping`` until the daemon answers again.

Long runs open at once: ``tail`` reads the last page of the conversation (History pages are
self-paired and folded by the daemon from its nearest fold mark), never the whole run;
``earlier`` reads one page before what is loaded. ``stats`` counts the History calls and
the messages they carried, which the tests and ``bench/view_open.py`` check.
"""

from __future__ import annotations

import socket as socketlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from journald_client import (
    CheckpointMeta,
    Client,
    DaemonUnavailable,
    JournaldError,
    JournalRecord,
    ListChanges,
    ResponseTooLarge,
    RestoreResult,
    RunInfo,
    RunState,
    SessionNotFound,
    VerifyResult,
    Watch,
)
from journald_client.errors import UntrustedSocket
from journald_client.paths import check_socket, default_socket_path
from journald_client.state import Message, PendingTurn

from journald.cli.checkpoint_commands import private_file
from journald.cli.replay import one_line
from journald.view.model import Entry, build_entries, plural

PAGE_MESSAGES = 100  # messages per History page the transcript asks for
RECORD_CONTEXT = 50  # records read before a page of records, for the calls of its results
SEARCH_PAGE_MESSAGES = 2000  # messages per History page a search reads (nothing is kept):
# each page far from the end costs a fold from the mark before it, so few large pages
PING_TIMEOUT_S = 2.0
OPEN_STATUSES = ("open", "held")


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run in the runs table: the daemon's listing plus its open turn's unanswered calls
    (None when not asked: the run has ended)."""

    info: RunInfo
    pending_calls: int | None


@dataclass(slots=True)
class Slice:
    """A loaded stretch of the conversation: ``messages`` from index ``start`` (to the end
    when ``at_end``; the run has ``total``), the open turn, and the seq it all reflects."""

    messages: list[Message]
    start: int
    total: int
    last_seq: int
    pending: PendingTurn | None

    @property
    def stop(self) -> int:
        """The index after the last loaded message."""
        return self.start + len(self.messages)

    @property
    def at_end(self) -> bool:
        return self.stop >= self.total


@dataclass(frozen=True, slots=True)
class RecordPage:
    before: list[JournalRecord]  # context: the records just before the page
    records: list[JournalRecord]
    last_seq: int


@dataclass(frozen=True, slots=True)
class CheckpointMark:
    """A checkpoint of the current conversation, shown where it was taken: after its first
    ``messages`` messages."""

    messages: int
    checkpoint_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Opening:
    ended: str  # "" while the run is open; else the terminal's reason (and its text)
    marker: str  # the rebase or fork the conversation starts from ("" if none)
    checkpoint_id: str = ""  # the checkpoint that holds the conversation before the rebase
    checkpoints: tuple[CheckpointMark, ...] = ()  # taken since that rebase (or the start)


@dataclass(slots=True)
class Stats:
    history_calls: int = 0
    messages_fetched: int = 0


@dataclass(frozen=True, slots=True)
class Details:
    state: RunState  # without its messages (Fold ``messages=False``)
    info: RunInfo | None
    checkpoints: list[CheckpointMeta]
    message_count: int


@dataclass(slots=True)
class _PendingProbe:
    last_seq: int
    calls: int


class Source:
    """A daemon connection for the viewer (thread-safe: gRPC channels are)."""

    def __init__(self, socket: str | None = None, *, page: int = PAGE_MESSAGES) -> None:
        self.socket = socket
        self.page = max(1, page)
        self.stats = Stats()
        self._client: Client | None = None
        self._lock = threading.Lock()
        self._probes: dict[str, _PendingProbe] = {}

    @property
    def socket_path(self) -> str:
        return (self.socket or default_socket_path()).removeprefix("unix:")

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.socket, name="journald-view", reconnect_timeout=0)
            return self._client

    def ping(self, timeout: float = PING_TIMEOUT_S) -> bool:
        """Whether the daemon answers now (a socket nobody listens on fails at once)."""
        try:
            check_socket(self.socket_path)  # never dial another user's socket
        except UntrustedSocket:
            return False
        probe = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        try:
            probe.settimeout(timeout)
            probe.connect(self.socket_path)
        except OSError:
            return False
        finally:
            probe.close()
        try:
            self.client.wait_ready(timeout)
        except DaemonUnavailable:
            return False
        return True

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # --- runs ----------------------------------------------------------------------------

    def runs(self) -> list[RunRow]:
        """Every run, newest first, with the unanswered calls of the runs still open: List
        says them for held runs; a dormant open run is asked once per last seq (History,
        limit 0), so a refresh costs one List when nothing moved."""
        infos = self.client.list()
        rows = []
        for info in infos:
            calls: int | None = info.pending_calls  # the daemon knows it for held runs
            if calls is None and info.status in OPEN_STATUSES:
                probe = self._probes.get(info.run_id)
                if probe is None or probe.last_seq != info.last_seq:
                    page = self.client.history(info.run_id, 0, 0, stored=True)
                    self.stats.history_calls += 1
                    n = len(page.pending.unanswered) if page.pending is not None else 0
                    probe = _PendingProbe(info.last_seq, n)
                    self._probes[info.run_id] = probe
                calls = probe.calls
            rows.append(RunRow(info, calls))
        return rows

    def list_changes(self) -> ListChanges:
        """The daemon's notices of listing changes (the runs table Lists on each)."""
        return self.client.list_changes()

    def run_gone(self, run_id: str) -> bool | None:
        """After a Watch ended: True when the daemon answers without the run, False when
        the run is still there, None when no daemon answers (it stopped or is stopping)."""
        if not self.ping():
            return None
        try:
            return self.info(run_id) is None
        except JournaldError:  # unavailable, or refused by a daemon shutting down
            return None

    def info(self, run_id: str) -> RunInfo | None:
        return next((i for i in self.client.list() if i.run_id == run_id), None)

    # --- the conversation ----------------------------------------------------------------

    def _history(self, run_id: str, offset: int, limit: int) -> tuple[list[Message], int, int]:
        page = self.client.history(run_id, offset, limit, stored=True)
        self.stats.history_calls += 1
        self.stats.messages_fetched += len(page.messages)
        return page.messages, page.offset, page.next_offset

    def tail(self, run_id: str, from_offset: int | None = None) -> Slice:
        """The conversation from ``from_offset`` (default: the last page) to its end, with
        the open turn and the seq it reflects."""
        if from_offset is None:
            head = self.client.history(run_id, 0, 0, stored=True)
            self.stats.history_calls += 1
            from_offset = max(0, head.total - self.page)
        messages: list[Message] = []
        start: int | None = None
        offset = from_offset
        for _ in range(1 << 16):  # bounded: each page moves forward or ends the loop
            page = self.client.history(run_id, offset, max(self.page, 1), stored=True)
            self.stats.history_calls += 1
            self.stats.messages_fetched += len(page.messages)
            if start is None:
                start = page.offset
            elif page.offset != offset:  # the run changed under us (a rebase): start over
                return self.tail(run_id)
            messages.extend(page.messages)
            if page.next_offset >= page.total or page.next_offset <= offset:
                return Slice(messages, start, page.total, page.last_seq, page.pending)
            offset = page.next_offset
        raise RuntimeError("History paging did not reach the end")  # pragma: no cover

    def earlier(self, run_id: str, before: int) -> tuple[list[Message], int]:
        """The page ending at message ``before`` (a clean boundary) and its start."""
        msgs, start, end = self._history(run_id, max(0, before - self.page), self.page)
        return msgs[: max(0, before - start)] if end > before else msgs, start

    def opening(self, run_id: str) -> Opening:
        """What the transcript says around the conversation: how the run ended (with the
        terminal record's text) and where its current conversation came from (the last
        compaction or restore, a fork's source). A few records read by seq (the last, the
        first, the one after the last pre_compaction/pre_restore checkpoint) and the
        checkpoint list: no fold, so it costs the same for any length of run."""
        info = self.info(run_id)
        ended = ""
        if info is not None and info.status not in OPEN_STATUSES:
            last = self._record(run_id, info.last_seq)
            if last is not None and last.kind == "terminal":
                reason = str(last.payload.get("reason", info.status))
                text = one_line(str(last.payload.get("message") or ""))
                ended = f"{reason} · {text}" if text else reason
        marker, checkpoint_id, since = "", "", 0
        checkpoints = self.client.checkpoints(run_id)
        pre = [c for c in checkpoints if c.trigger in ("pre_compaction", "pre_restore")]
        if pre:
            cp = max(pre, key=lambda c: c.seq)
            rec = self._record(run_id, cp.seq + 1)
            if rec is not None and rec.kind == "rebase":
                reason = str(rec.payload.get("reason", "rebase"))
                marker = f"{reason} at seq {rec.seq} (checkpoint {cp.checkpoint_id} holds "
                marker += f"the {plural(cp.message_count, 'message')} before it)"
                checkpoint_id = cp.checkpoint_id
                since = rec.seq
        # checkpoints of the conversation as it is now: each counts the messages before it
        # (one taken before the last rebase counted another conversation's messages)
        marks = tuple(
            CheckpointMark(
                c.message_count,
                c.checkpoint_id,
                f"checkpoint {c.checkpoint_id}{f' {one_line(c.label)!r}' if c.label else ''} "
                f"at seq {c.seq} ({c.trigger}; f forks from here, r restores to here)",
            )
            for c in sorted(checkpoints, key=lambda c: c.seq)
            if c.seq > since and c.trigger not in ("pre_compaction", "pre_restore")
        )
        if not marker:
            meta = self._record(run_id, 1)
            lineage = meta.payload.get("lineage") if meta is not None else None
            if isinstance(lineage, dict):
                src = one_line(str(lineage.get("forked_from_run_id", "?")))
                marker = f"fork of run {src} at seq {lineage.get('forked_at_seq', '?')}"
        return Opening(ended, marker, checkpoint_id, marks)

    def records(self, run_id: str, from_seq: int | None) -> RecordPage:
        """A page of stored records from ``from_seq`` (None: the last page), up to
        ``RECORD_CONTEXT`` records before it (a result's call may be there) and the run's last
        seq; the Load stream is closed after the page."""
        info = self.info(run_id)
        if info is None:
            raise SessionNotFound(f"run {run_id} not found", metadata={"run_id": run_id})
        start = max(1, info.last_seq - self.page + 1) if from_seq is None else max(1, from_seq)
        got: list[JournalRecord] = []
        records = self.client.load(run_id, max(1, start - RECORD_CONTEXT))
        try:
            for rec in records:
                got.append(rec)
                if rec.seq >= start + self.page - 1:
                    break
        finally:
            records.close()
        before = [r for r in got if r.seq < start]
        page = [r for r in got if r.seq >= start]
        return RecordPage(before, page, max(info.last_seq, got[-1].seq if got else 0))

    def _record(self, run_id: str, seq: int) -> JournalRecord | None:
        """The stored record at ``seq`` (None past the end)."""
        records = self.client.load(run_id, max(1, seq))
        try:
            return next(records, None)
        finally:
            records.close()

    def at(self, run_id: str, offset: int) -> Slice:
        """One page from message ``offset`` (aligned back to a clean boundary by the daemon);
        the open turn only when the page reaches the end."""
        page = self.client.history(run_id, max(0, offset), self.page, stored=True)
        self.stats.history_calls += 1
        self.stats.messages_fetched += len(page.messages)
        got = Slice(page.messages, page.offset, page.total, page.last_seq, page.pending)
        if not got.at_end:
            got.pending = None
        return got

    def seek(self, run_id: str, *, seq: int = 0, when: str = "") -> tuple[Slice, int, int]:
        """One page holding the message the record at ``seq`` (or the first record at or
        after time ``when``) folded into, that message's index and the record's seq; the
        daemon finds them (History ``at_seq``/``at_time``)."""
        page = self.client.history(run_id, 0, self.page, at_seq=seq, at_time=when)
        self.stats.history_calls += 1
        self.stats.messages_fetched += len(page.messages)
        got = Slice(page.messages, page.offset, page.total, page.last_seq, page.pending)
        if not got.at_end:
            got.pending = None
        return got, page.at_index, page.at_seq

    def head(self, run_id: str) -> Slice:
        """No messages: the run's total, last seq and open turn (one cheap History)."""
        page = self.client.history(run_id, 0, 0, stored=True)
        self.stats.history_calls += 1
        return Slice([], page.total, page.total, page.last_seq, page.pending)

    def search(
        self, run_id: str, query: str, found: Callable[[list[Entry], int, int], bool]
    ) -> None:
        """Every entry of the run whose text holds ``query`` (case-insensitive), read by pages
        of ``SEARCH_PAGE_MESSAGES`` from the end back to the start (the newest matches, the
        ones a reader at the end looks for first, come first), none kept:
        ``found(hits, from_message, total)`` after each page (everything from message
        ``from_message`` on has been read), which returns False to stop."""
        q = query.lower()
        total = self.client.history(run_id, 0, 0, stored=True).total
        self.stats.history_calls += 1
        before, size = total, SEARCH_PAGE_MESSAGES
        while before > 0:
            try:
                page = self.client.history(run_id, max(0, before - size), size, stored=True)
            except ResponseTooLarge:  # big tool outputs: ask for fewer messages at a time
                if size == 1:
                    raise
                size = max(1, size // 4)
                continue
            self.stats.history_calls += 1
            if page.offset >= before:  # no progress (the run shrank under us): stop
                break
            # pages end at clean boundaries, so a call and its result stay in one slice
            msgs = page.messages[: before - page.offset]
            entries = build_entries(msgs, page.offset, None)
            hits = [e for e in entries if e.kind != "gap" and q in e.haystack()]
            before = page.offset
            if not found(hits, before, total):
                break

    def watch(self, run_id: str, from_seq: int) -> Watch:
        return self.client.watch(run_id, from_seq)

    # --- details and actions -------------------------------------------------------------

    def details(self, run_id: str) -> Details:
        state = self.client.fold(run_id, messages=False)
        total = self.client.history(run_id, 0, 0, stored=True).total
        self.stats.history_calls += 1
        return Details(state, self.info(run_id), self.client.checkpoints(run_id), total)

    def delete(self, run_id: str) -> bool:
        return self.client.delete(run_id)

    def verify(self, run_id: str) -> VerifyResult:
        return self.client.verify(run_id)

    def checkpoints(self, run_id: str) -> Sequence[CheckpointMeta]:
        return self.client.checkpoints(run_id)

    def take_checkpoint(self, run_id: str, label: str) -> CheckpointMeta:
        return self.client.checkpoint(run_id, label)

    def restore(self, run_id: str, checkpoint_id: str) -> RestoreResult:
        return self.client.restore(run_id, checkpoint_id)

    def fork(self, run_id: str, checkpoint_id: str, new_run_id: str) -> str:
        return self.client.fork(run_id, checkpoint_id=checkpoint_id, new_run_id=new_run_id)[0]

    def export(self, run_id: str, checkpoint_id: str, path: Path) -> int:
        with private_file(path) as out:  # chunk by chunk; the file appears once complete
            return self.client.export_checkpoint_to(run_id, checkpoint_id, out)
