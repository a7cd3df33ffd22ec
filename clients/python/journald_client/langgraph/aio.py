"""``AsyncJournaldSaver``: the asyncio LangGraph checkpointer on journald.

    async with AsyncJournaldSaver() as saver:  # or AsyncJournaldSaver.connect(socket)
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke(inputs, {"configurable": {"thread_id": "t-1"}})

``AsyncJournaldSaver(client)`` wraps a connection you own; without one the saver connects
when first used and closes it in ``aclose``. ``connect(...)`` may be awaited (``saver =
await AsyncJournaldSaver.connect()``) or entered (``async with``), like LangGraph's own
``from_conn_string``. Same layout and lease rules as ``JournaldSaver`` (see
``journald_client.langgraph.saver``), over ``AsyncClient``. The sync methods may be called
from another thread than the saver's event loop (they run on that loop); called on the loop
itself they would deadlock, so they raise instead.
"""

from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Generator, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

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
from journald_client.aio import AsyncClient, AsyncRun, connect_async
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

T = TypeVar("T")


@dataclass(slots=True)
class _Held:
    run: AsyncRun
    index: ThreadIndex
    mirror: _mirror.Mirror


class AsyncJournaldSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` on journald for asyncio graphs."""

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        socket: str | None = None,
        serde: SerializerProtocol | None = None,
        name: str = "langgraph",
        max_held_threads: int = 64,
        messages_channel: str | None = "messages",
        owns_client: bool = False,
        hold_leases: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self._client = client
        self._socket = socket
        self.hold_leases = hold_leases
        self._active = ActiveRuns()
        self.name = name
        self.max_held_threads = max(1, max_held_threads)
        self.messages_channel = messages_channel
        self._owns_client = owns_client or client is None
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._lock = asyncio.Lock()
        self._cache = BoundedCache()
        # journal seq of each thread's last read without its lease (see changed_since_read)
        self._read_seq: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def connect(
        cls, socket: str | None = None, *, name: str = "langgraph", **kwargs: Any
    ) -> _Connecting:
        """A saver over its own connection (closed by ``aclose``): ``await`` it, or use it
        as ``async with AsyncJournaldSaver.connect(...) as saver``."""
        return _Connecting(cls, socket, name, kwargs)

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise RuntimeError(
                "AsyncJournaldSaver is not connected yet: use it as `async with "
                "AsyncJournaldSaver() as saver`, or `saver = await AsyncJournaldSaver.connect()`"
            )
        return self._client

    async def _ready(self) -> None:
        """Bind the saver to the running loop (and connect, when it makes its own client)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._client is None:
            self._client = await connect_async(self._socket, name=self.name)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    # --- leases -----------------------------------------------------------------------------

    async def _writer(self, thread_id: str) -> _Held:
        held = self._held.get(thread_id)
        if held is not None and not held.run.closed:
            self._held.move_to_end(thread_id)
            return held
        try:
            run = await self.client.open(
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
            await run.close()
            raise
        held = _Held(run, ThreadIndex.of(run.state.state), _mirror.Mirror.of(run.state))
        self._held[thread_id] = held
        while len(self._held) > self.max_held_threads:
            _, old = self._held.popitem(last=False)
            await old.run.close()
        return held

    async def _begin_run(self, thread_id: str, loop: object | None) -> None:
        """LangGraph's loop is loading the thread to run it: take the lease before any node
        runs; give it back when the loop exits (see ``JournaldSaver._begin_run``)."""
        await self._writer(thread_id)
        if loop is None or not self._active.begin(thread_id, loop):
            return
        stack = getattr(loop, "stack", None)
        if isinstance(stack, AsyncExitStack):
            stack.push_async_callback(self._end_run, thread_id, loop)
        elif stack is not None:  # a sync graph driving this saver from another thread
            stack.callback(lambda: self._on_loop(self._end_run(thread_id, loop)))

    async def _end_run(self, thread_id: str, loop: object) -> None:
        async with self._lock:
            if self._active.end(thread_id, loop) and not self.hold_leases:
                await self._release(thread_id)

    async def _settle(self, thread_id: str) -> None:
        if not self.hold_leases and not self._active.running(thread_id):
            await self._release(thread_id)

    async def hold(self, thread_id: str) -> None:
        """Take the thread's writer lease now (``locked`` if another process holds it)."""
        await self._ready()
        async with self._lock:
            await self._writer(thread_id)

    async def release(self, thread_id: str) -> None:
        """Give the thread's writer lease back."""
        async with self._lock:
            await self._release(thread_id)

    async def _release(self, thread_id: str) -> None:
        held = self._held.pop(thread_id, None)
        if held is not None:
            await held.run.close()

    async def aclose(self) -> None:
        async with self._lock:
            for thread_id in list(self._held):
                await self._release(thread_id)
        if self._owns_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> AsyncJournaldSaver:
        await self._ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- reading ----------------------------------------------------------------------------

    async def _index(self, thread_id: str) -> ThreadIndex | None:
        held = self._held.get(thread_id)
        if held is not None and not held.run.closed:
            return held.index
        try:
            state = await self.client.fold(run_id_for(thread_id))
        except errors.SessionNotFound:
            return None
        self._read_seq[thread_id] = state.last_seq
        return ThreadIndex.of(state.state)

    async def _fetch(self, thread_id: str, refs: Sequence[Ref]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for ref in refs:
            if not ref.sha256 or ref.sha256 in out:
                continue
            data = self._cache.get(ref.sha256)
            if data is None:
                data = await self.client.get_attachment(run_id_for(thread_id), ref.sha256)
                self._cache.put(ref.sha256, data, len(data))
            out[ref.sha256] = data
        return out

    async def _record(self, thread_id: str, ref: Ref) -> dict[str, Any]:
        key = record_key(ref)
        rec = self._cache.get(key)
        if rec is None:
            fetched = await self._fetch(thread_id, [ref])
            data = fetched[ref.sha256] if ref.sha256 else ref.data
            rec = self.serde.loads_typed((ref.type, data))
            self._cache.put(key, rec, len(data) + 64)
        # the loop mutates what it loaded: never hand out the cached record itself
        return copy.deepcopy(rec)

    async def _tuple(
        self, thread_id: str, index: ThreadIndex, ns: str, cid: str
    ) -> CheckpointTuple | None:
        ref = index.checkpoint_ref(ns, cid)
        if ref is None:
            return None
        record = await self._record(thread_id, ref)
        fetched = await self._fetch(thread_id, tuple_refs(index, ns, cid, record))
        return build_tuple(index, thread_id, ns, cid, record, self.serde, fetched)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        loop = calling_loop() if starting_graph_run(config) else None
        return await self._get_tuple(config, loop)

    async def _get_tuple(
        self, config: RunnableConfig, loop: object | None
    ) -> CheckpointTuple | None:
        thread_id, ns = thread_of(config)
        await self._ready()
        async with self._lock:
            if starting_graph_run(config):
                await self._begin_run(thread_id, loop)
            index = await self._index(thread_id)
            if index is None:
                return None
            cid = get_checkpoint_id(config) or index.latest(ns)
            return await self._tuple(thread_id, index, ns, cid) if cid else None

    async def _thread_ids(self) -> list[str]:
        out = []
        for info in await self.client.list():
            if info.model == FINGERPRINT.model:
                labels = (await self.client.fold(info.run_id)).labels
                out.append(labels.get(THREAD_LABEL, info.run_id))
        return out

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        await self._ready()
        async with self._lock:
            found = await self._select(config, filter, before, limit)
        for tup in found:
            yield tup

    async def _select(
        self,
        config: RunnableConfig | None,
        flt: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[CheckpointTuple]:
        scope = ListScope.of(config, before)
        out: list[CheckpointTuple] = []
        for thread_id in [scope.thread_id] if scope.thread_id else await self._thread_ids():
            index = await self._index(thread_id)
            if index is None:
                continue
            for ns, cid, ref in scope.candidates(index):
                if not matches((await self._record(thread_id, ref)).get("metadata") or {}, flt):
                    continue
                if limit is not None and len(out) >= limit:
                    return out
                tup = await self._tuple(thread_id, index, ns, cid)
                if tup is not None:
                    out.append(tup)
        return out

    # --- writing ----------------------------------------------------------------------------

    async def _append(
        self, thread_id: str, changes: Sequence[Change], extra: Sequence[Entry] = ()
    ) -> None:
        held = await self._writer(thread_id)
        entries: list[Entry] = []
        refs: list[Ref | None] = []
        for ch in changes:
            att = None
            if ch.large:
                assert ch.typed is not None
                vtype, data = ch.typed
                att = await self.client.put_attachment(
                    held.run.run_id, data, ATTACHMENT_MEDIA_TYPE, vtype
                )
                self._cache.put(att.sha256, data, len(data))
            entry, ref = entry_for(ch, att)
            entries.append(entry)
            refs.append(ref)
        if not entries and not extra:
            return
        try:
            await held.run.append_many([*entries, *extra])
        except errors.JournaldError as exc:
            raise in_graph_terms(thread_id, exc) from exc
        for ch, ref in zip(changes, refs, strict=True):
            held.index.apply(ch.namespace, ch.key, ref)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        changes, out = plan_put(self.serde, config, checkpoint, metadata, new_versions)
        thread_id, ns = thread_of(config)
        await self._ready()
        async with self._lock:
            held = await self._writer(thread_id)
            extra = held.mirror.entries(ns, checkpoint, self.messages_channel, held.run)
            await self._append(thread_id, changes, extra)
            held.mirror.committed()
            await self._settle(thread_id)
        return out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, _ = thread_of(config)
        await self._ready()
        async with self._lock:
            held = await self._writer(thread_id)
            changes = plan_writes(self.serde, held.index, config, writes, task_id, task_path)
            await self._append(thread_id, changes)
            await self._settle(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._ready()
        async with self._lock:
            await self._release(thread_id)
            await self.client.delete(run_id_for(thread_id))

    async def _records(
        self, thread_id: str, index: ThreadIndex
    ) -> dict[tuple[str, str], dict[str, Any]]:
        out = {}
        for ns, cps in index.checkpoints.items():
            for cid, ref in cps.items():
                out[(ns, cid)] = await self._record(thread_id, ref)
        return out

    async def _drop(self, thread_id: str, doomed: set[tuple[str, str]] | None) -> None:
        index = (await self._writer(thread_id)).index
        changes = deletions(index, doomed, await self._records(thread_id, index))
        await self._append(thread_id, [Change(ns, key, None) for ns, key in changes])
        await self._settle(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        if not wanted:
            return
        await self._ready()
        async with self._lock:
            for thread_id in await self._thread_ids():
                index = await self._index(thread_id)
                if index is None:
                    continue
                records = await self._records(thread_id, index)
                doomed = {
                    key
                    for key, rec in records.items()
                    if (rec.get("metadata") or {}).get("run_id") in wanted
                }
                if doomed:
                    await self._drop(thread_id, doomed)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """A journald fork of the source thread's head into a new thread."""
        await self._ready()
        async with self._lock:
            try:
                await self.client.fork(
                    run_id_for(source_thread_id),
                    new_run_id=run_id_for(target_thread_id),
                    labels={THREAD_LABEL: target_thread_id},
                )
            except errors.SessionNotFound:
                return

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._ready()
        async with self._lock:
            for thread_id in thread_ids:
                index = await self._index(thread_id)
                if index is not None and index.checkpoints:
                    await self._drop(thread_id, pruned(index, strategy))

    # --- sync: run on the saver's loop from another thread ------------------------------------

    def _on_loop(self, coro: Awaitable[T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._loop is None:
            raise RuntimeError(
                "AsyncJournaldSaver has no event loop yet: enter it (`async with`) or await "
                "`AsyncJournaldSaver.connect()` on the loop that runs it first"
            )
        if running is self._loop:
            close = getattr(coro, "close", None)
            if close is not None:
                close()
            raise RuntimeError(
                "a sync method of AsyncJournaldSaver was called on its own event loop, where "
                "it would wait for itself forever; use the async method (aget_tuple, aput, ...) "
                "or call it from another thread"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        loop = calling_loop() if starting_graph_run(config) else None
        return self._on_loop(self._get_tuple(config, loop))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            async with self._lock:
                return await self._select(config, filter, before, limit)

        yield from self._on_loop(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._on_loop(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._on_loop(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._on_loop(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._on_loop(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._on_loop(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._on_loop(self.aprune(thread_ids, strategy=strategy))


class _Connecting:
    """What ``AsyncJournaldSaver.connect`` returns: awaitable (the connected saver) and an
    async context manager (the saver, closed on exit)."""

    def __init__(
        self, cls: type[AsyncJournaldSaver], socket: str | None, name: str, kwargs: dict[str, Any]
    ) -> None:
        self._cls, self._socket, self._name, self._kwargs = cls, socket, name, kwargs
        self._saver: AsyncJournaldSaver | None = None

    async def _open(self) -> AsyncJournaldSaver:
        saver = self._cls(socket=self._socket, name=self._name, owns_client=True, **self._kwargs)
        await saver._ready()
        return saver

    def __await__(self) -> Generator[Any, None, AsyncJournaldSaver]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncJournaldSaver:
        self._saver = await self._open()
        return self._saver

    async def __aexit__(self, *exc: object) -> None:
        if self._saver is not None:
            await self._saver.aclose()
