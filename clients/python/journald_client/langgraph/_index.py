"""A LangGraph thread as journald framework state: the layout and the pure index over it.

One LangGraph thread is one journald run. Its checkpoints, channel values and pending writes
are state records (``Entry.state``), each an opaque typed value exactly as the saver's serde
gives it (``dumps_typed``):

* ``langgraph.checkpoint`` / ``[ns, checkpoint_id]``: ``{"checkpoint" (without its channel
  values), "metadata", "parent"}``, one record per ``put``;
* ``langgraph.blob`` / ``[ns, channel, version]``: one channel value, written only when
  ``put`` says the channel has a new version, so an unchanged channel is never stored again
  (a value above ``INLINE_MAX_BYTES`` goes to a content-addressed attachment: equal bytes are
  held once per run);
* ``langgraph.writes`` / ``[ns, checkpoint_id, task_id, idx, channel, task_path]``: one
  pending write.

Keys are JSON arrays (compact, UTF-8), so no separator character is ever ambiguous. The
daemon's fold keeps the latest value of every key; ``ThreadIndex`` reads those entries and
answers LangGraph's questions without I/O: which checkpoint is latest, which values and
writes make up a tuple. The savers fetch attachment bytes and run the serde.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from journald_client.state import StateEntry

NS_CHECKPOINT = "langgraph.checkpoint"
NS_BLOB = "langgraph.blob"
NS_WRITES = "langgraph.writes"
NAMESPACES = (NS_CHECKPOINT, NS_BLOB, NS_WRITES)
INLINE_MAX_BYTES = 4096
"""Values up to this size are inline in their record (and in every Fold of the run); larger
ones live in an attachment and the record carries its SHA-256."""

Typed = tuple[str, bytes]


def state_key(*parts: object) -> str:
    return json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


def version_key(version: object) -> str:
    """Channel versions may be int, float or str; the key holds one spelling of each."""
    return version if isinstance(version, str) else repr(version)


@dataclass(frozen=True, slots=True)
class Ref:
    """Where a value's bytes are: inline, or in the attachment ``sha256``."""

    type: str
    data: bytes = b""
    sha256: str = ""
    size: int = 0


@dataclass(frozen=True, slots=True)
class Write:
    key: str
    task_id: str
    idx: int
    channel: str
    task_path: str
    ref: Ref


@dataclass(slots=True)
class ThreadIndex:
    """The latest state of one thread, by checkpoint namespace."""

    checkpoints: dict[str, dict[str, Ref]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], Ref] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = field(default_factory=dict)

    @classmethod
    def of(cls, entries: Iterable[StateEntry]) -> ThreadIndex:
        index = cls()
        for e in entries:
            index.apply(e.namespace, e.key, Ref(e.type, e.data, e.sha256, e.size))
        return index

    def apply(self, namespace: str, key: str, ref: Ref | None) -> None:
        """Follow one state record (``ref`` None: a deletion; an empty key: the namespace)."""
        if not key:
            if ref is None:
                self._clear(namespace)
            return
        try:
            parts = json.loads(key)
        except ValueError:
            return  # not ours: another framework's key in a shared namespace
        if namespace == NS_CHECKPOINT and len(parts) == 2:
            ns, cid = parts
            if ref is None:
                self.checkpoints.get(ns, {}).pop(cid, None)
            else:
                self.checkpoints.setdefault(ns, {})[cid] = ref
        elif namespace == NS_BLOB and len(parts) == 3:
            if ref is None:
                self.blobs.pop((parts[0], parts[1], parts[2]), None)
            else:
                self.blobs[(parts[0], parts[1], parts[2])] = ref
        elif namespace == NS_WRITES and len(parts) == 6:
            ns, cid, task_id, idx, channel, task_path = parts
            slot = self.writes.setdefault((ns, cid), {})
            if ref is None:
                if (task_id, idx) in slot and slot[(task_id, idx)].key == key:
                    del slot[(task_id, idx)]
            else:
                slot[(task_id, idx)] = Write(key, task_id, idx, channel, task_path, ref)

    def _clear(self, namespace: str) -> None:
        if namespace == NS_CHECKPOINT:
            self.checkpoints.clear()
        elif namespace == NS_BLOB:
            self.blobs.clear()
        elif namespace == NS_WRITES:
            self.writes.clear()

    # --- reads ----------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        return sorted(ns for ns, cps in self.checkpoints.items() if cps)

    def latest(self, ns: str) -> str | None:
        cps = self.checkpoints.get(ns)
        return max(cps) if cps else None

    def ids_newest_first(self, ns: str) -> list[str]:
        return sorted(self.checkpoints.get(ns, {}), reverse=True)

    def checkpoint_ref(self, ns: str, cid: str) -> Ref | None:
        return self.checkpoints.get(ns, {}).get(cid)

    def writes_of(self, ns: str, cid: str) -> list[Write]:
        slot = self.writes.get((ns, cid), {})
        return sorted(slot.values(), key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))

    def blob_refs(self, ns: str, versions: Mapping[str, object]) -> dict[str, Ref]:
        out = {}
        for channel, version in versions.items():
            ref = self.blobs.get((ns, channel, version_key(version)))
            if ref is not None and ref.type != "empty":
                out[channel] = ref
        return out

    def all_refs(self) -> Iterator[Ref]:
        for cps in self.checkpoints.values():
            yield from cps.values()
        yield from self.blobs.values()
        for slot in self.writes.values():
            yield from (w.ref for w in slot.values())


def load(serde: SerializerProtocol, ref: Ref, fetched: Mapping[str, bytes]) -> Any:
    data = fetched[ref.sha256] if ref.sha256 else ref.data
    return serde.loads_typed((ref.type, data))


def config_of(thread_id: str, ns: str, cid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}


def build_tuple(
    index: ThreadIndex,
    thread_id: str,
    ns: str,
    cid: str,
    record: Mapping[str, Any],
    serde: SerializerProtocol,
    fetched: Mapping[str, bytes],
) -> CheckpointTuple:
    """The tuple of checkpoint ``cid`` (its decoded record given), values and writes loaded."""
    checkpoint = dict(record["checkpoint"])
    refs = index.blob_refs(ns, checkpoint.get("channel_versions", {}))
    checkpoint["channel_values"] = {ch: load(serde, r, fetched) for ch, r in refs.items()}
    parent = record.get("parent")
    writes: list[PendingWrite] = [
        (w.task_id, w.channel, load(serde, w.ref, fetched)) for w in index.writes_of(ns, cid)
    ]
    return CheckpointTuple(
        config=config_of(thread_id, ns, cid),  # type: ignore[arg-type]
        checkpoint=checkpoint,  # type: ignore[arg-type]
        metadata=record.get("metadata") or {},  # type: ignore[arg-type]
        parent_config=config_of(thread_id, ns, parent) if parent else None,  # type: ignore[arg-type]
        pending_writes=writes,
    )


def tuple_refs(index: ThreadIndex, ns: str, cid: str, record: Mapping[str, Any]) -> list[Ref]:
    """Every value a tuple needs besides its checkpoint record (to fetch attachments first)."""
    versions = record["checkpoint"].get("channel_versions", {})
    return [*index.blob_refs(ns, versions).values(), *(w.ref for w in index.writes_of(ns, cid))]


def matches(metadata: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    return not flt or all(metadata.get(k) == v for k, v in flt.items())


def pruned(index: ThreadIndex, strategy: str) -> set[tuple[str, str]] | None:
    """The checkpoints a prune removes: ``keep_latest`` keeps the newest of each checkpoint
    namespace, ``delete`` removes everything (None: drop the whole namespaces)."""
    if strategy == "delete":
        return None
    if strategy != "keep_latest":
        raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
    return {(ns, c) for ns, cps in index.checkpoints.items() for c in cps if c != max(cps)}


def deletions(
    index: ThreadIndex,
    doomed: set[tuple[str, str]] | None,
    records: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[tuple[str, str]]:
    """The (namespace, key) deletions removing the checkpoints ``doomed`` with their writes,
    and every channel value no surviving checkpoint references (``records``: the decoded
    checkpoint records of the thread). ``doomed`` None removes the whole thread's state."""
    if doomed is None:
        return [(ns, "") for ns in NAMESPACES]
    out: list[tuple[str, str]] = []
    for ns, cid in sorted(doomed):
        out.append((NS_CHECKPOINT, state_key(ns, cid)))
        out += [(NS_WRITES, w.key) for w in index.writes_of(ns, cid)]
    used = set()
    for (ns, cid), rec in records.items():
        if (ns, cid) not in doomed:
            for ch, v in rec["checkpoint"].get("channel_versions", {}).items():
                used.add((ns, ch, version_key(v)))
    out += [(NS_BLOB, state_key(*k)) for k in sorted(index.blobs) if k not in used]
    return out
