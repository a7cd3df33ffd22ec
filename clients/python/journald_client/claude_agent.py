"""``JournaldSessionStore``: a Claude Agent SDK ``SessionStore`` on journald
(``pip install 'journald-client[claude-agent]'``).

    from claude_agent_sdk import ClaudeAgentOptions, query
    from journald_client.claude_agent import JournaldSessionStore

    async with JournaldSessionStore() as store:
        options = ClaudeAgentOptions(session_store=store)
        async for message in query(prompt="hello", options=options):
            ...

**A session is a run.** The transcript of ``(project_key, session_id)`` is the run
``ca-<digest of store prefix and project>-<session id>``; its labels name the store prefix, the
project key and the session id, so ``list_sessions`` is one ``List``.

**A subagent transcript is a namespaced part of its session's run, not a run of its own.**
The CLI writes a session's subagent transcripts from the same process as the main one, so one
writer lease covers all of them (two runs would need two leases, and another process could
hold one of them while this one holds the other); deleting the session deletes the run, so a
subagent transcript can never be orphaned; ``list_subkeys`` is an index in the same fold; a
resume reads one run; and a subpath (any string) never has to become a run id.

**Entries are kept exactly.** Each ``append`` is one durable append of ``state`` records: the
batch's entries as JSON lines (``json.dumps`` of what the SDK gave, keys in its order), keyed
by batch number, so every batch stays a live value (a fork of the run carries the whole
transcript; a prune never drops it). A transcript has two namespaces: ``<ns>.tail``, the
recent batches inline, and ``<ns>``, segments in run attachments (content-addressed, 8 MiB a
part), where ``<ns>`` is ``claude_agent.main`` or ``claude_agent.sub.<digest of the subpath>``
(the subpath itself is kept in the ``claude_agent.subpaths`` index). When the tail would pass
``TAIL_BUDGET_BYTES`` (or a batch is over ``INLINE_MAX_BYTES``), the tail and the new batch
become one segment and the tail is emptied, in the same append: the run's fold, which every
``Open`` and ``Fold`` carries whole, stays small however long the session, and a ``load`` is
one ``Fold`` and a parallel read of a few segments. ``load`` gives back what ``json.loads``
makes of those lines: the same values, keys in the same order. An entry whose ``uuid`` the
transcript already holds is not stored again (the SDK's idempotency key: a retried batch may
overlap one that landed); entries without a ``uuid`` always are. Main-transcript appends also
write the session summary (``fold_session_summary``) in the same append; its ``mtime``, like
``list_sessions``'s, is the run's last record time.

**The writer's lease is held while the SDK appends.** The first write of a session takes its
run's lease and keeps it until ``release(key)``, ``close()`` (or leaving ``async with``), the
end of the process, or ``idle_release_s`` after its last write when that is set. A second
process mirroring the same session meanwhile is refused: its ``append`` raises ``Locked``
naming this process, and the SDK reports the dropped batch as a ``MirrorErrorMessage`` after
its retries. Reads never take the lease. Calls run the sync client on worker threads, so one
store serves any event loop.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from socket import gethostname
from typing import TypeVar, cast

import anyio.to_thread
from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from journald_client import errors
from journald_client.client import Client, Run, connect
from journald_client.codec import Entry
from journald_client.fingerprint import Fingerprint, compute
from journald_client.state import RunInfo, StateEntry

NS_MAIN = "claude_agent.main"
NS_SUB_PREFIX = "claude_agent.sub."
NS_SUBPATHS = "claude_agent.subpaths"
NS_SUMMARY = "claude_agent.summary"
SUMMARY_KEY = "summary"
VALUE_TYPE = "jsonl"
LABEL_STORE = "claude_agent.store"
LABEL_PROJECT = "claude_agent.project_key"
LABEL_SESSION = "claude_agent.session_id"
LABEL_FIRST = "claude_agent.first_write"
"""``main`` or ``subagent``: which transcript created the run (a run made by a subagent write
is listed only once its main transcript exists)."""
TAIL = ".tail"
INLINE_MAX_BYTES = 64 * 1024
TAIL_BUDGET_BYTES = 256 * 1024
"""A transcript's inline tail stays within this (every ``Open`` and ``Fold`` of the run carries
it); past it the tail becomes a segment in an attachment."""
PART_MAX_BYTES = 8 * 1024 * 1024
"""The daemon's attachment limit: a batch above it is stored in parts."""
LOAD_THREADS = 8
FINGERPRINT: Fingerprint = compute(
    provider="claude-agent-sdk", model="session-store", system_prompt=[]
)
T = TypeVar("T")


def _utf8(text: str) -> bytes:
    """Bytes to hash: any string, a lone surrogate included."""
    return text.encode("utf-8", "surrogatepass")


def run_id_for(prefix: str, project_key: str, session_id: str) -> str:
    """The run of a session: ``ca-<12 hex of (prefix, project)>-<session id>``, or
    ``ca-<40 hex of all three>`` when the session id would not make a valid run id."""
    if not session_id:
        raise errors.InvalidRequest(
            "a Claude Agent session key needs a session_id; nothing was read or written",
            metadata={"field": "session_id", "project_key": project_key},
        )
    scope = hashlib.sha256(_utf8(f"{prefix}\0{project_key}")).hexdigest()[:12]
    candidate = f"ca-{scope}-{session_id}"
    safe = all(c.isascii() and (c.isalnum() or c in "-_") for c in session_id)
    if safe and len(candidate) <= 128:
        return candidate
    digest = hashlib.sha256(_utf8(f"{prefix}\0{project_key}\0{session_id}")).hexdigest()
    return f"ca-{digest[:40]}"


def namespace_for(subpath: str | None) -> str:
    """The state namespace of a transcript: the main one, or a digest of the subpath (a
    subpath is any string; a namespace is at most 256 characters)."""
    if not subpath:
        return NS_MAIN
    return NS_SUB_PREFIX + hashlib.sha256(_utf8(subpath)).hexdigest()[:32]


def encode_entries(entries: Iterable[SessionStoreEntry]) -> bytes:
    """One JSON line per entry, as ``json.dumps`` writes what the SDK gave (UTF-8; an entry
    holding a lone surrogate, which UTF-8 cannot carry, as ASCII with ``\\u`` escapes)."""
    lines = []
    for e in entries:
        text = json.dumps(e, ensure_ascii=False, separators=(",", ":"))
        try:
            lines.append(text.encode() + b"\n")
        except UnicodeEncodeError:
            lines.append(json.dumps(e, separators=(",", ":")).encode() + b"\n")
    return b"".join(lines)


def decode_entries(data: bytes) -> list[SessionStoreEntry]:
    return [cast(SessionStoreEntry, json.loads(line)) for line in data.split(b"\n") if line]


def batch_key(batch: int, part: int) -> str:
    return f"{batch:016d}.{part:04d}"


def _epoch_ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339).timestamp() * 1000)


@dataclass
class _Writer:
    """A held lease and what this process knows of the run while it holds it (nobody else
    can write the run meanwhile, so the caches stay true)."""

    run: Run
    next_batch: dict[str, int] = field(default_factory=dict)
    uuids: dict[str, set[str]] = field(default_factory=dict)
    tails: dict[str, bytes] = field(default_factory=dict)
    tail_first: dict[str, int] = field(default_factory=dict)
    subpaths: set[str] = field(default_factory=set)
    summary: SessionSummaryEntry | None = None
    timer: threading.Timer | None = None


class JournaldSessionStore(SessionStore):
    """A Claude Agent SDK ``SessionStore`` whose transcripts are journald runs (see the module
    doc). ``prefix`` scopes the store (two stores with different prefixes share nothing, as
    two key prefixes of one bucket); ``idle_release_s`` gives a session's lease back that long
    after its last write (None: held until ``release``/``close``)."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        socket: str | None = None,
        prefix: str = "",
        name: str = "claude-agent-sdk",
        idle_release_s: float | None = None,
    ) -> None:
        self._owns_client = client is None
        self.client = client if client is not None else connect(socket, name=name)
        self.prefix = prefix
        self.name = name
        self.idle_release_s = idle_release_s
        self._writers: dict[str, _Writer] = {}
        self._lock = threading.RLock()

    # --- plumbing ---------------------------------------------------------------------------

    async def _call(self, fn: Callable[[], T]) -> T:
        # A cancelled call (the SDK's per-append and per-load timeouts) returns at once and
        # its thread finishes on its own: an append may still land, as the SDK expects of a
        # timed-out one (it does not retry those), and the next one waits for it (the lock).
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)

    def _run_id(self, key: SessionKey | SessionListSubkeysKey) -> str:
        return run_id_for(self.prefix, key["project_key"], key["session_id"])

    def _writer(self, key: SessionKey) -> _Writer:
        run_id = self._run_id(key)
        held = self._writers.get(run_id)
        if held is not None and not held.run.closed:
            return held
        labels = {
            LABEL_STORE: self.prefix,
            LABEL_PROJECT: key["project_key"],
            LABEL_SESSION: key["session_id"],
            LABEL_FIRST: "subagent" if key.get("subpath") else "main",
        }
        try:
            run = self.client.open(run_id, FINGERPRINT, [], labels=labels, name=self.name)
        except errors.JournaldError as exc:
            raise self._in_store_terms(exc, key) from exc
        writer = _Writer(run)
        for e in sorted(run.state.state, key=lambda e: e.key):
            ns = e.namespace.removesuffix(TAIL)
            if ns == NS_MAIN or ns.startswith(NS_SUB_PREFIX):
                batch = int(e.key.split(".", 1)[0]) + 1
                writer.next_batch[ns] = max(writer.next_batch.get(ns, 0), batch)
                if e.namespace.endswith(TAIL):
                    writer.tails[ns] = writer.tails.get(ns, b"") + e.data
                    writer.tail_first.setdefault(ns, batch - 1)
            elif e.namespace == NS_SUBPATHS:
                writer.subpaths.add(e.key)
            elif e.namespace == NS_SUMMARY and e.key == SUMMARY_KEY:
                writer.summary = cast(SessionSummaryEntry, json.loads(e.data))
        self._writers[run_id] = writer
        return writer

    def _release_writer(self, run_id: str) -> None:
        writer = self._writers.pop(run_id, None)
        if writer is None:
            return
        if writer.timer is not None:
            writer.timer.cancel()
        writer.run.close()

    def _idle_soon(self, run_id: str, writer: _Writer) -> None:
        if self.idle_release_s is None:
            return
        if writer.timer is not None:
            writer.timer.cancel()

        def release_if_still_idle() -> None:
            with self._lock:
                if self._writers.get(run_id) is writer and writer.timer is timer:
                    self._release_writer(run_id)

        timer = threading.Timer(self.idle_release_s, release_if_still_idle)
        timer.daemon = True
        writer.timer = timer
        timer.start()

    def _in_store_terms(self, exc: errors.JournaldError, key: SessionKey) -> errors.JournaldError:
        """The error in the SDK's words: which transcript, what happened, what to do. Its text
        is what a ``MirrorErrorMessage`` shows."""
        where = f"session {key['session_id']!r} of project {key['project_key']!r}"
        if key.get("subpath"):
            where = f"subagent transcript {key.get('subpath')!r} of {where}"
        if isinstance(exc, errors.Locked):
            who = f"pid {exc.holder_pid}" if exc.holder_pid else "another process"
            host = f" on {exc.holder_host}" if exc.holder_host else ""
            fix = (
                "Let that process finish (or release the session), or resume the session "
                "under a new id"
            )
            if exc.holder_pid == os.getpid() and exc.holder_host in ("", gethostname()):
                fix = (
                    "It is this process: another JournaldSessionStore holds the session; "
                    "share one store, or close (or release) the other one first"
                )
            message = (
                f"the {where} is being mirrored by {who}{host}"
                f"{f' ({exc.holder_name})' if exc.holder_name else ''}: this batch was not "
                f"stored. {fix}"
            )
        else:
            message = f"the {where} could not be stored ({exc.code}: {exc.message})"
        meta = {**exc.metadata, "session_id": key["session_id"]}
        return type(exc)(message, metadata=meta, diff=exc.diff, status=exc.status)

    # --- reading ----------------------------------------------------------------------------

    def _fold_state(self, run_id: str) -> list[StateEntry] | None:
        try:
            return self.client.fold(run_id, messages=False).state
        except errors.SessionNotFound:
            return None

    def _read(self, run_id: str, state: Sequence[StateEntry], ns: str) -> bytes | None:
        """A transcript's bytes: its segments, then its tail, each in key order (segment parts
        fetched a few at a time); None when it holds nothing."""
        segments = sorted((e for e in state if e.namespace == ns), key=lambda e: e.key)
        tail = sorted((e for e in state if e.namespace == ns + TAIL), key=lambda e: e.key)
        ordered = segments + tail
        if not ordered:
            return None
        remote = [e.sha256 for e in ordered if not e.inline]
        fetched: dict[str, bytes] = {}
        if remote:
            with ThreadPoolExecutor(max_workers=min(LOAD_THREADS, len(remote))) as pool:
                got = pool.map(lambda sha: self.client.get_attachment(run_id, sha), remote)
                fetched = dict(zip(remote, got, strict=True))
        return b"".join(e.data if e.inline else fetched[e.sha256] for e in ordered)

    def _load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        run_id = self._run_id(key)
        state = self._fold_state(run_id)
        if state is None:
            return None
        data = self._read(run_id, state, namespace_for(key.get("subpath")))
        return None if data is None else decode_entries(data)

    def _sessions(self, project_key: str) -> list[tuple[RunInfo, int]]:
        """This store's sessions of ``project_key`` that have a main transcript, with their
        mtime (epoch ms of the run's last record)."""
        out: list[tuple[RunInfo, int]] = []
        for info in self.client.list():
            labels = info.labels
            if labels.get(LABEL_STORE) != self.prefix or labels.get(LABEL_PROJECT) != project_key:
                continue
            if labels.get(LABEL_FIRST) == "subagent":
                state = self._fold_state(info.run_id) or []
                if not any(e.namespace.removesuffix(TAIL) == NS_MAIN for e in state):
                    continue
            out.append((info, _epoch_ms(info.updated or info.created)))
        return out

    # --- writing ----------------------------------------------------------------------------

    def _append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        if not entries:
            return
        run_id = self._run_id(key)
        subpath = key.get("subpath") or None
        if subpath is not None and len(subpath) > 1024:
            raise errors.InvalidRequest(
                f"subpath {subpath[:64]!r}... is {len(subpath)} characters, over journald's "
                "1024 for a state key; nothing was written",
                metadata={"field": "subpath", "session_id": key["session_id"]},
            )
        with self._lock:
            writer = self._writer(key)
            try:
                self._append_held(run_id, writer, key, subpath, entries)
            except errors.JournaldError as exc:
                self._release_writer(run_id)  # what landed is unknown: read it again next time
                raise self._in_store_terms(exc, key) from exc
            except BaseException:
                self._release_writer(run_id)
                raise
            self._idle_soon(run_id, writer)

    def _append_held(
        self,
        run_id: str,
        writer: _Writer,
        key: SessionKey,
        subpath: str | None,
        entries: list[SessionStoreEntry],
    ) -> None:
        ns = namespace_for(subpath)
        seen = self._uuids(run_id, writer, ns)
        fresh: list[SessionStoreEntry] = []
        for e in entries:
            uuid = e.get("uuid")
            if isinstance(uuid, str):
                if uuid in seen:
                    continue
                seen.add(uuid)
            fresh.append(e)
        if not fresh:
            return
        body = encode_entries(fresh)
        batch = writer.next_batch.get(ns, 0)
        tail = writer.tails.get(ns, b"")
        records: list[Entry] = []
        if len(body) <= INLINE_MAX_BYTES and len(tail) + len(body) <= TAIL_BUDGET_BYTES:
            records.append(Entry.state(ns + TAIL, batch_key(batch, 0), VALUE_TYPE, body))
            if not tail:
                writer.tail_first[ns] = batch
            tail += body
        else:  # the tail and this batch become one segment, keyed by the first batch in it
            first = writer.tail_first.get(ns, batch) if tail else batch
            segment = tail + body
            for part, start in enumerate(range(0, len(segment), PART_MAX_BYTES)):
                chunk = segment[start : start + PART_MAX_BYTES]
                ref = self.client.put_attachment(run_id, chunk, "application/jsonl")
                records.append(
                    Entry.state(
                        ns, batch_key(first, part), VALUE_TYPE, sha256=ref.sha256, size=ref.size
                    )
                )
            if tail:
                records.append(Entry.state(ns + TAIL, "", deleted=True))
            tail = b""
        summary: SessionSummaryEntry | None = None
        if subpath is not None and subpath not in writer.subpaths:
            records.append(Entry.state(NS_SUBPATHS, subpath, "text", ns.encode()))
        if subpath is None:
            summary = fold_session_summary(writer.summary, key, fresh)
            summary["mtime"] = int(time.time() * 1000)  # the read reports the record's time
            data = json.dumps(summary, ensure_ascii=False, separators=(",", ":")).encode()
            records.append(Entry.state(NS_SUMMARY, SUMMARY_KEY, "json", data))
        writer.run.append_many(records)
        writer.next_batch[ns] = batch + 1
        writer.tails[ns] = tail
        if subpath is not None:
            writer.subpaths.add(subpath)
        if summary is not None:
            writer.summary = summary

    def _uuids(self, run_id: str, writer: _Writer, ns: str) -> set[str]:
        """The uuids the transcript holds: read once per lease (the lease keeps them true)."""
        known = writer.uuids.get(ns)
        if known is None:
            data = self._read(run_id, writer.run.state.state, ns)
            entries = decode_entries(data) if data is not None else []
            known = {u for e in entries if isinstance(u := e.get("uuid"), str)}
            writer.uuids[ns] = known
        return known

    def _delete(self, key: SessionKey) -> None:
        run_id = self._run_id(key)
        subpath = key.get("subpath") or None
        with self._lock:
            if subpath is None:  # the run, and every subagent transcript in it
                self._release_writer(run_id)
                try:
                    self.client.delete(run_id)
                except errors.JournaldError as exc:
                    raise self._in_store_terms(exc, key) from exc
                return
            state = self._fold_state(run_id)
            ns = namespace_for(subpath)
            if state is None or not any(e.namespace in (ns, ns + TAIL, NS_SUBPATHS) for e in state):
                return  # never written: nothing to delete, and no run made to say so
            writer = self._writer(key)
            try:
                writer.run.append_many(
                    [
                        Entry.state(ns, "", deleted=True),
                        Entry.state(ns + TAIL, "", deleted=True),
                        Entry.state(NS_SUBPATHS, subpath, deleted=True),
                    ]
                )
            except errors.JournaldError as exc:
                self._release_writer(run_id)
                raise self._in_store_terms(exc, key) from exc
            writer.subpaths.discard(subpath)
            writer.next_batch.pop(ns, None)
            writer.tails.pop(ns, None)
            writer.uuids[ns] = set()  # the Open's state still shows what was deleted
            self._idle_soon(run_id, writer)

    # --- the SessionStore protocol ----------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch in one durable append, under this process's lease of the session."""
        await self._call(lambda: self._append(key, list(entries)))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The transcript's entries in append order; None if it was never written (or was
        deleted)."""
        return await self._call(lambda: self._load(key))

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's sessions with their mtime (epoch ms of the run's last record)."""
        found = await self._call(lambda: self._sessions(project_key))
        return [{"session_id": info.labels[LABEL_SESSION], "mtime": mtime} for info, mtime in found]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The summaries kept with each main-transcript append, stamped with the run's last
        record time: the clock ``list_sessions`` uses, and no older than the summary."""

        def summaries() -> list[SessionSummaryEntry]:
            out: list[SessionSummaryEntry] = []
            for info, mtime in self._sessions(project_key):
                state = self._fold_state(info.run_id) or []
                for e in state:
                    if e.namespace == NS_SUMMARY and e.key == SUMMARY_KEY:
                        summary = cast(SessionSummaryEntry, json.loads(e.data))
                        out.append({**summary, "mtime": mtime})
            return out

        return await self._call(summaries)

    async def delete(self, key: SessionKey) -> None:
        """Delete a session (its run, subagent transcripts included), or with a ``subpath``
        only that transcript. Refused with ``Locked`` while another process mirrors it."""
        await self._call(lambda: self._delete(key))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The session's subagent transcript subpaths."""

        def subkeys() -> list[str]:
            state = self._fold_state(self._run_id(key)) or []
            return sorted(e.key for e in state if e.namespace == NS_SUBPATHS)

        return await self._call(subkeys)

    # --- the lease --------------------------------------------------------------------------

    async def release(self, key: SessionKey | SessionListSubkeysKey) -> None:
        """Give the session's lease back now (another process may then mirror it)."""

        def release() -> None:
            with self._lock:
                self._release_writer(self._run_id(key))

        await self._call(release)

    def close(self) -> None:
        """Give back every lease (and the connection, if the store made it)."""
        with self._lock:
            for run_id in list(self._writers):
                self._release_writer(run_id)
            if self._owns_client:
                self.client.close()

    async def __aenter__(self) -> JournaldSessionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._call(self.close)
