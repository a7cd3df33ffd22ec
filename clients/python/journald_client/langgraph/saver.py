"""``JournaldSaver``: a LangGraph checkpointer whose threads are journald runs (sync).

    from journald_client.langgraph import JournaldSaver

    with JournaldSaver() as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

A graph run takes the thread's writer lease when LangGraph's loop loads the thread, before
any node or tool runs, and gives it back when the run ends (``invoke``/``stream`` returns,
an interrupt included): a second process driving the same thread meanwhile is refused
``locked`` naming the first, before any of its nodes runs, instead of silently forking the
thread; ``get_state`` from anywhere still answers. So one saver per request works: the next
request's saver gets the lease. ``hold_leases=True`` keeps each lease from its thread's first
write until ``release(thread_id)`` or ``close()`` (a worker that owns its threads). A write
outside a graph run (``update_state``, ``delete_for_runs``, ``prune``) holds the lease for
that write only. Every
``put`` and ``put_writes`` is one durable append (fsync'd, or acknowledged by JetStream)
before it returns; after a crash the next process resumes from the last durable checkpoint
with its pending writes. Reads of a held thread are answered from memory; other threads are
read with one Fold. The async methods run the sync ones on a worker thread (an async graph
is better served by ``AsyncJournaldSaver``).
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from journald_client import errors
from journald_client.client import Client, Run, connect
from journald_client.codec import Entry
from journald_client.langgraph import _mirror
from journald_client.langgraph._core import (
    ATTACHMENT_MEDIA_TYPE,
    FINGERPRINT,
    THREAD_LABEL,
    ActiveRuns,
    BoundedCache,
    Change,
    ListScope,
    calling_loop,
    changed_since_read,
    entry_for,
    in_graph_terms,
    next_version,
    plan_put,
    plan_writes,
    record_key,
    run_id_for,
    starting_graph_run,
    thread_of,
)
from journald_client.langgraph._index import (
    Ref,
    ThreadIndex,
    build_tuple,
    deletions,
    matches,
    pruned,
    tuple_refs,
)


@dataclass(slots=True)
class _Held:
    run: Run
    index: ThreadIndex
    mirror: _mirror.Mirror


class JournaldSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` on journald (see the module doc)."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        socket: str | None = None,
        serde: SerializerProtocol | None = None,
        name: str = "langgraph",
        max_held_threads: int = 64,
        messages_channel: str | None = "messages",
        hold_leases: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self.hold_leases = hold_leases
        self._owns_client = client is None
        self.client = client if client is not None else connect(socket, name=name)
        self.name = name
        self.max_held_threads = max(1, max_held_threads)
        self.messages_channel = messages_channel
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.RLock()
        self._cache = BoundedCache()
        # journal seq of each thread's last read without its lease (see changed_since_read)
        self._read_seq: dict[str, int] = {}
        self._active = ActiveRuns()

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    # --- leases -----------------------------------------------------------------------------

    def _writer(self, thread_id: str) -> _Held:
        held = self._held.get(thread_id)
        if held is not None and not held.run.closed:
            self._held.move_to_end(thread_id)
            return held
        try:
            run = self.client.open(
                run_id_for(thread_id),
                FINGERPRINT,
                [],
                labels={THREAD_LABEL: thread_id},
                name=self.name,
            )
        except errors.Locked as exc:
            raise in_graph_terms(thread_id, exc) from exc
        try:
            changed_since_read(thread_id, self._read_seq.pop(thread_id, None), run.last_seq)
        except errors.SeqConflict:
            run.close()
            raise
        state = run.state
        held = _Held(run, ThreadIndex.of(state.state), _mirror.Mirror.of(state))
        self._held[thread_id] = held
        while len(self._held) > self.max_held_threads:
            _, old = self._held.popitem(last=False)
            old.run.close()
        return held

    def _begin_run(self, thread_id: str, loop: object | None) -> None:
        """LangGraph's loop is loading the thread to run it: take the lease now, before any
        node runs, and give it back when the loop exits (its exit stack unwinds after every
        background write of the run is durable)."""
        self._writer(thread_id)
        if loop is None or not self._active.begin(thread_id, loop):
            return
        stack = getattr(loop, "stack", None)
        if isinstance(stack, AsyncExitStack):

            async def ended() -> None:
                await asyncio.to_thread(self._end_run, thread_id, loop)

            stack.push_async_callback(ended)
        elif stack is not None:
            stack.callback(self._end_run, thread_id, loop)

    def _end_run(self, thread_id: str, loop: object) -> None:
        with self._lock:
            if self._active.end(thread_id, loop) and not self.hold_leases:
                self._release(thread_id)

    def _settle(self, thread_id: str) -> None:
        """After a write outside a graph run: give the lease back (unless leases are held)."""
        if not self.hold_leases and not self._active.running(thread_id):
            self._release(thread_id)

    def hold(self, thread_id: str) -> None:
        """Take the thread's writer lease now (``locked`` if another process holds it)."""
        with self._lock:
            self._writer(thread_id)

    def release(self, thread_id: str) -> None:
        """Give the thread's writer lease back (another process may drive it next)."""
        with self._lock:
            self._release(thread_id)

    def _release(self, thread_id: str) -> None:
        held = self._held.pop(thread_id, None)
        if held is not None:
            held.run.close()

    def close(self) -> None:
        with self._lock:
            for thread_id in list(self._held):
                self.release(thread_id)
            if self._owns_client:
                self.client.close()

    def __enter__(self) -> JournaldSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------

    def _index(self, thread_id: str) -> ThreadIndex | None:
        held = self._held.get(thread_id)
        if held is not None and not held.run.closed:
            return held.index
        try:
            state = self.client.fold(run_id_for(thread_id))
        except errors.SessionNotFound:
            return None
        self._read_seq[thread_id] = state.last_seq
        return ThreadIndex.of(state.state)

    def _fetch(self, thread_id: str, refs: Sequence[Ref]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for ref in refs:
            if not ref.sha256 or ref.sha256 in out:
                continue
            data = self._cache.get(ref.sha256)
            if data is None:
                data = self.client.get_attachment(run_id_for(thread_id), ref.sha256)
                self._cache.put(ref.sha256, data, len(data))
            out[ref.sha256] = data
        return out

    def _record(self, thread_id: str, ref: Ref) -> dict[str, Any]:
        key = record_key(ref)
        rec = self._cache.get(key)
        if rec is None:
            fetched = self._fetch(thread_id, [ref])
            data = fetched[ref.sha256] if ref.sha256 else ref.data
            rec = self.serde.loads_typed((ref.type, data))
            self._cache.put(key, rec, len(data) + 64)
        # LangGraph's loop mutates the checkpoint it loaded (channel_versions, versions_seen):
        # a caller never gets the cached record itself
        return copy.deepcopy(rec)

    def _tuple(
        self, thread_id: str, index: ThreadIndex, ns: str, cid: str
    ) -> CheckpointTuple | None:
        ref = index.checkpoint_ref(ns, cid)
        if ref is None:
            return None
        record = self._record(thread_id, ref)
        fetched = self._fetch(thread_id, tuple_refs(index, ns, cid, record))
        return build_tuple(index, thread_id, ns, cid, record, self.serde, fetched)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        loop = calling_loop() if starting_graph_run(config) else None
        return self._get_tuple(config, loop)

    def _get_tuple(self, config: RunnableConfig, loop: object | None) -> CheckpointTuple | None:
        thread_id, ns = thread_of(config)
        with self._lock:
            if starting_graph_run(config):
                self._begin_run(thread_id, loop)
            index = self._index(thread_id)
            if index is None:
                return None
            cid = get_checkpoint_id(config) or index.latest(ns)
            return self._tuple(thread_id, index, ns, cid) if cid else None

    def _thread_ids(self) -> list[str]:
        out = []
        for info in self.client.list():
            if info.model != FINGERPRINT.model:
                continue
            labels = self.client.fold(info.run_id).labels
            out.append(labels.get(THREAD_LABEL, info.run_id))
        return out

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with self._lock:
            found = list(self._select(config, filter, before, limit))
        yield from found

    def _select(
        self,
        config: RunnableConfig | None,
        flt: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        scope = ListScope.of(config, before)
        left = limit
        for thread_id in [scope.thread_id] if scope.thread_id else self._thread_ids():
            index = self._index(thread_id)
            if index is None:
                continue
            for ns, cid, ref in scope.candidates(index):
                if not matches(self._record(thread_id, ref).get("metadata") or {}, flt):
                    continue
                if left is not None and left <= 0:
                    return
                tup = self._tuple(thread_id, index, ns, cid)
                if tup is not None:
                    left = None if left is None else left - 1
                    yield tup

    # --- writing ----------------------------------------------------------------------------

    def _append(
        self, thread_id: str, changes: Sequence[Change], extra: Sequence[Entry] = ()
    ) -> None:
        held = self._writer(thread_id)
        entries: list[Entry] = []
        refs: list[Ref | None] = []
        for ch in changes:
            att = None
            if ch.large:
                assert ch.typed is not None
                vtype, data = ch.typed
                att = self.client.put_attachment(
                    held.run.run_id, data, ATTACHMENT_MEDIA_TYPE, vtype
                )
                self._cache.put(att.sha256, data, len(data))
            entry, ref = entry_for(ch, att)
            entries.append(entry)
            refs.append(ref)
        if not entries and not extra:
            return
        try:
            held.run.append_many([*entries, *extra])
        except errors.JournaldError as exc:
            raise in_graph_terms(thread_id, exc) from exc
        for ch, ref in zip(changes, refs, strict=True):
            held.index.apply(ch.namespace, ch.key, ref)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        changes, out = plan_put(self.serde, config, checkpoint, metadata, new_versions)
        thread_id, ns = thread_of(config)
        with self._lock:
            held = self._writer(thread_id)
            extra = held.mirror.entries(ns, checkpoint, self.messages_channel, held.run)
            self._append(thread_id, changes, extra)
            held.mirror.committed()
            self._settle(thread_id)
        return out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, _ = thread_of(config)
        with self._lock:
            held = self._writer(thread_id)
            changes = plan_writes(self.serde, held.index, config, writes, task_id, task_path)
            self._append(thread_id, changes)
            self._settle(thread_id)

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            self.release(thread_id)
            self.client.delete(run_id_for(thread_id))

    def _records(self, thread_id: str, index: ThreadIndex) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            (ns, cid): self._record(thread_id, ref)
            for ns, cps in index.checkpoints.items()
            for cid, ref in cps.items()
        }

    def _drop(self, thread_id: str, doomed: set[tuple[str, str]] | None) -> None:
        index = self._writer(thread_id).index
        changes = deletions(index, doomed, self._records(thread_id, index))
        self._append(thread_id, [Change(ns, key, None) for ns, key in changes])
        self._settle(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        if not wanted:
            return
        with self._lock:
            for thread_id in self._thread_ids():
                index = self._index(thread_id)
                if index is None:
                    continue
                doomed = {
                    key
                    for key, rec in self._records(thread_id, index).items()
                    if (rec.get("metadata") or {}).get("run_id") in wanted
                }
                if doomed:
                    self._drop(thread_id, doomed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread into a new thread: a journald fork
        of the source's head (the conversation mirror and the framework state travel)."""
        with self._lock:
            try:
                self.client.fork(
                    run_id_for(source_thread_id),
                    new_run_id=run_id_for(target_thread_id),
                    labels={THREAD_LABEL: target_thread_id},
                )
            except errors.SessionNotFound:
                return

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        with self._lock:
            for thread_id in thread_ids:
                index = self._index(thread_id)
                if index is None or not index.checkpoints:
                    continue
                self._drop(thread_id, pruned(index, strategy))

    # --- async: the sync methods on a worker thread -------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        loop = calling_loop() if starting_graph_run(config) else None
        return await asyncio.to_thread(self._get_tuple, config, loop)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
