"""What the sync and async LangGraph savers share: the thread/run mapping and the plans of
their writes (which state records a ``put`` or ``put_writes`` appends), all without I/O."""

from __future__ import annotations

import secrets
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from journald_client import codec, errors
from journald_client.codec import Entry
from journald_client.fingerprint import Fingerprint, compute
from journald_client.langgraph._index import (
    INLINE_MAX_BYTES,
    NS_BLOB,
    NS_CHECKPOINT,
    NS_WRITES,
    Ref,
    ThreadIndex,
    Typed,
    state_key,
    version_key,
)
from journald_client.state import AttachmentRef

FINGERPRINT: Fingerprint = compute(provider="langgraph", model="langgraph", system_prompt=[])
"""Every thread run carries this fingerprint: the run holds graph state, not one model's
configuration (``journald ls`` shows the model ``langgraph``)."""
THREAD_LABEL = "langgraph.thread_id"
ATTACHMENT_MEDIA_TYPE = "application/vnd.langgraph.value"


RUNTIME_KEY = "__pregel_runtime"
"""The configurable key LangGraph's loop adds when it loads a checkpoint to run the graph
(``get_state`` and ``update_state`` read without it)."""


def run_id_for(thread_id: str) -> str:
    """The journald run of a thread (the run's label keeps the thread id). A thread id that
    would spell an Agents session's run (``oa-...``) is hashed, so a thread and a session with
    the same id never share a run."""
    if thread_id.startswith("oa-"):
        return codec.run_id_for("\x00" + thread_id, "lg-")
    return codec.run_id_for(thread_id, "lg-")


def next_version(current: str | int | float | None) -> str:
    """A channel version unique to its branch: the step counter (zero-padded, so versions
    still order as LangGraph compares them) and a random tail. Two branches forked from one
    checkpoint write the same channel at the same step; a plain counter would give both the
    same blob key and the later branch would overwrite the earlier one's value."""
    if current is None:
        n = 0
    elif isinstance(current, str):
        n = int(current.split(".", 1)[0])
    else:
        n = int(current)
    return f"{n + 1:032d}.{secrets.token_hex(8)}"


def starting_graph_run(config: RunnableConfig) -> bool:
    """True when this read is LangGraph's loop loading the thread to run nodes on it."""
    return RUNTIME_KEY in (config.get("configurable") or {})


def calling_loop(max_depth: int = 16) -> Any | None:
    """The LangGraph loop (``SyncPregelLoop``/``AsyncPregelLoop``) whose ``__enter__`` is
    calling the saver, found on the call stack; None when there is none (another caller, or
    a LangGraph version that loads checkpoints elsewhere). Its exit stack tells the saver
    when the graph run ends."""
    try:
        from langgraph.pregel._loop import PregelLoop
    except ImportError:  # pragma: no cover - a LangGraph without the loop module
        return None
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, PregelLoop):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


class ActiveRuns:
    """How many graph runs (a run and its subgraphs' loops) each thread has in this saver:
    the lease is given back when the last of them ends (unless the saver holds leases)."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._loops: set[int] = set()

    def begin(self, thread_id: str, loop: Any) -> bool:
        """Count ``loop`` once for ``thread_id``; True when it is new (register its end)."""
        if id(loop) in self._loops:
            return False
        self._loops.add(id(loop))
        self._count[thread_id] = self._count.get(thread_id, 0) + 1
        return True

    def end(self, thread_id: str, loop: Any) -> bool:
        """The loop ended; True when it was the thread's last."""
        self._loops.discard(id(loop))
        left = self._count.get(thread_id, 1) - 1
        if left > 0:
            self._count[thread_id] = left
            return False
        self._count.pop(thread_id, None)
        return True

    def running(self, thread_id: str) -> bool:
        return thread_id in self._count


def in_graph_terms(thread_id: str, exc: errors.JournaldError) -> errors.JournaldError:
    """The same error, told in LangGraph's words: what happened to the thread and what to do,
    not which journald call failed (the original stays as ``__cause__``)."""
    if isinstance(exc, errors.Locked):
        who = f"pid {exc.holder_pid}" if exc.holder_pid else "another process"
        name = f" ({exc.holder_name})" if exc.holder_name else ""
        message = (
            f"LangGraph thread {thread_id!r} is being run by {who}{name}: two runs of one "
            "thread at once would fork it, so this run did not start any node. Wait for that "
            "run to end (its lease ends when its invoke returns or the process exits), or use "
            "another thread_id"
        )
    else:
        message = (
            f"LangGraph thread {thread_id!r}: the checkpointer could not save this step "
            f"({exc.code}: {exc.message}); the thread keeps its last saved checkpoint"
        )
    out = type(exc)(
        message,
        metadata={**exc.metadata, "thread_id": thread_id},
        diff=exc.diff,
        status=exc.status,
    )
    return out


def changed_since_read(thread_id: str, read_seq: int | None, leased_seq: int) -> None:
    """Refuse to write on a read that went stale: this process read the thread without its
    lease (at ``read_seq``) and another writer appended before the lease was granted.
    Writing now would silently fork the thread from an old checkpoint."""
    if read_seq is not None and leased_seq > read_seq:
        raise errors.SeqConflict(
            f"thread {thread_id} changed since this process read it (journal seq {read_seq}, "
            f"now {leased_seq}): another process wrote to it in between; invoke the graph "
            "again to continue from the thread's latest checkpoint",
            metadata={"thread_id": thread_id, "read_seq": str(read_seq), "seq": str(leased_seq)},
        )


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    conf = config.get("configurable") or {}
    thread_id = conf.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ValueError(
            "the config has no configurable.thread_id: LangGraph needs one to find the "
            "thread's checkpoints (pass config={'configurable': {'thread_id': ...}})"
        )
    return str(thread_id), str(conf.get("checkpoint_ns", ""))


@dataclass(frozen=True, slots=True)
class Change:
    """One state record to append: a value (``typed``) or a deletion (``typed`` None)."""

    namespace: str
    key: str
    typed: Typed | None

    @property
    def large(self) -> bool:
        return self.typed is not None and len(self.typed[1]) > INLINE_MAX_BYTES


def plan_put(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> tuple[list[Change], RunnableConfig]:
    """The records of a ``put``: a value per channel with a new version (an unchanged
    channel is not stored again), then the checkpoint record."""
    thread_id, ns = thread_of(config)
    rest: dict[str, Any] = dict(checkpoint)
    values: Mapping[str, Any] = rest.pop("channel_values", {}) or {}
    changes = [
        Change(
            NS_BLOB,
            state_key(ns, channel, version_key(version)),
            serde.dumps_typed(values[channel]) if channel in values else ("empty", b""),
        )
        for channel, version in new_versions.items()
    ]
    record = {
        "checkpoint": rest,
        "metadata": get_checkpoint_metadata(config, metadata),
        "parent": get_checkpoint_id(config),
    }
    changes.append(
        Change(NS_CHECKPOINT, state_key(ns, checkpoint["id"]), serde.dumps_typed(record))
    )
    out: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
        }
    }
    return changes, out


def plan_writes(
    serde: SerializerProtocol,
    index: ThreadIndex,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> list[Change]:
    """The records of a ``put_writes``: idempotent per (task, index) for regular writes; a
    special write (error, interrupt, ...) replaces the one stored under its index."""
    _, ns = thread_of(config)
    cid = get_checkpoint_id(config)
    if not cid:
        raise ValueError("put_writes needs configurable.checkpoint_id (the writes' checkpoint)")
    stored = index.writes.get((ns, cid), {})
    out: list[Change] = []
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        old = stored.get((task_id, idx))
        if idx >= 0 and old is not None:
            continue
        key = state_key(ns, cid, task_id, idx, channel, task_path)
        if old is not None and old.key != key:
            out.append(Change(NS_WRITES, old.key, None))
        out.append(Change(NS_WRITES, key, serde.dumps_typed(value)))
    return out


def entry_for(change: Change, attachment: AttachmentRef | None) -> tuple[Entry, Ref | None]:
    """The state record of a change (``attachment``: where a large value was put) and the
    reference the thread index keeps once it is durable (None: a deletion)."""
    if change.typed is None:
        return Entry.state(change.namespace, change.key, deleted=True), None
    vtype, data = change.typed
    if attachment is not None:
        sha, size = attachment.sha256, attachment.size
        entry = Entry.state(change.namespace, change.key, vtype, sha256=sha, size=size)
        return entry, Ref(vtype, b"", sha, size)
    return Entry.state(change.namespace, change.key, vtype, data), Ref(vtype, data)


@dataclass(frozen=True, slots=True)
class ListScope:
    """What a ``list`` call asks for: one thread or all, a namespace, an id, a cursor."""

    thread_id: str | None
    ns: str | None
    checkpoint_id: str | None
    before_id: str | None

    @classmethod
    def of(cls, config: RunnableConfig | None, before: RunnableConfig | None) -> ListScope:
        conf = (config or {}).get("configurable") or {}
        return cls(
            str(conf["thread_id"]) if conf.get("thread_id") else None,
            conf.get("checkpoint_ns"),
            get_checkpoint_id(config) if config else None,
            get_checkpoint_id(before) if before else None,
        )

    def candidates(self, index: ThreadIndex) -> Iterator[tuple[str, str, Ref]]:
        """The thread's checkpoints in scope, newest first within each namespace."""
        for ns in index.namespaces():
            if self.ns is not None and ns != self.ns:
                continue
            for cid in index.ids_newest_first(ns):
                if (self.checkpoint_id and cid != self.checkpoint_id) or (
                    self.before_id and cid >= self.before_id
                ):
                    continue
                ref = index.checkpoint_ref(ns, cid)
                if ref is not None:
                    yield ns, cid, ref


class BoundedCache:
    """Attachment bytes by digest and decoded checkpoint records, kept up to a byte budget
    (content-addressed, so entries never go stale)."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[object, tuple[int, Any]] = OrderedDict()
        self._bytes = 0

    def get(self, key: object) -> Any:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[1]

    def put(self, key: object, value: Any, size: int) -> None:
        if key in self._items:
            return
        self._items[key] = (size, value)
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._items) > 1:
            _, (old, _) = self._items.popitem(last=False)
            self._bytes -= old


def record_key(ref: Ref) -> tuple[str, str, bytes]:
    return ("record", ref.sha256, ref.data if not ref.sha256 else b"")
