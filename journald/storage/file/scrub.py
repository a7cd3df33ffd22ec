"""The file backend's scrub: every run verified at a paced read rate, in a child process.

The daemon's scrubber (``journald.server.scrub``, docs/design.md#scrubbing) starts this module
as ``python -m journald.storage.file.scrub DATA_DIR BYTES_PER_S`` once per pass; it verifies
every run directory of ``DATA_DIR`` in turn and writes one JSON line per run on its stdout:

    {"run_id": ..., "ok": true, "records": n, "bytes": n, "key": [...]}
    {"run_id": ..., "ok": false, "message": ..., "metadata": {...}, "key": [...]}
    {"run_id": ..., "gone": true}                      deleted meanwhile
    {"run_id": ..., "skipped": "..."}                  could not be read now; next pass

Each run gets the walk ``journald verify`` makes (``FileReads.verify``: framing, checksums,
chain, manifest entries and digests, then ``journald.storage.verify``'s walk, then every
message page its rebases reference: present, and hashing to its name; ``check_pages``; then
every chunk its fold snapshot names, page references and answered ids, ``check_answered``),
with
every file read through a ``ReadBudget``. A process of its own, at the lowest CPU and I/O
priority, so that its decoding never holds the daemon's interpreter lock while an append
waits for it; after each run it rests as long as the CPU time the run's walk took, so it uses
at most half a core. It only reads: no lock, no write (the daemon records the results).

``key`` is what ``run_key`` says about the run's files when its walk started: a finding
applies to the run only while its files still have that key (see ``run_key``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

from journald.core.answered import chunk_missing, decode_chunk
from journald.core.errors import JournaldError, SessionNotFound, StoreCorrupted
from journald.core.pages import PageRef, decode_page, page_missing
from journald.core.rebase_chunks import chunk_map_resolver, referenced_chunks, referenced_pages
from journald.core.records import Record, validate_id
from journald.core.ref_chunks import decode_ref_chunk, ref_chunk_missing
from journald.core.snapshot import snapshot_answered_head, snapshot_chunks
from journald.storage.file.checkpoint_store import (
    SNAPSHOT_FILE,
    FileAttachmentStore,
    FileCheckpointStore,
)
from journald.storage.file.segments import JOURNAL, MANIFEST, SEGMENTS
from journald.storage.pages import named_page_error
from journald.storage.scrub_budget import ReadBudget

NICE = 19
IOPRIO_CLASS_IDLE = 3
IOPRIO_SET = {"x86_64": 251, "aarch64": 30}  # syscall numbers of ioprio_set(2)


def run_key(run_dir: str) -> list[Any]:
    """What the files a finding is about look like to a stat: the manifest's and each sealed
    segment's inode, size and mtime, and the active segment's inode. Appends to the active
    segment leave it alone (a damaged active segment is refused by every open and read on its
    own); a seal, a prune, a recovery or a restore from a backup changes it, and the finding
    no longer applies."""

    def facts(path: str) -> list[int] | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    seg_dir = os.path.join(run_dir, SEGMENTS)
    names = sorted(os.listdir(seg_dir)) if os.path.isdir(seg_dir) else []
    segments = [[n, facts(os.path.join(seg_dir, n))] for n in names]
    active = facts(os.path.join(run_dir, JOURNAL))
    return [facts(os.path.join(run_dir, MANIFEST)), segments, active and active[0]]


def scrub_run(store: Any, run_id: str, budget: ReadBudget) -> dict[str, Any]:
    """One run verified through ``budget``: its result line (see the module doc)."""
    try:
        key = run_key(store.run_dir(run_id))
    except (OSError, JournaldError) as exc:
        return {"run_id": run_id, "skipped": str(exc)}
    start = budget.bytes_read
    try:
        rebases: list[Record] = []
        rep = store.reads.verify(run_id, budget, rebases)
        check_pages(store.run_dir(run_id), run_id, rebases, budget)
        check_answered(store.run_dir(run_id), run_id, budget)
    except SessionNotFound:
        return {"run_id": run_id, "gone": True}
    except StoreCorrupted as exc:
        meta = {k: str(v) for k, v in exc.metadata.items()}
        return {
            "run_id": run_id,
            "ok": False,
            "message": exc.message,
            "metadata": meta,
            "bytes": budget.bytes_read - start,
            "key": key,
        }
    except (OSError, JournaldError) as exc:  # changing too fast, unreadable now: next pass
        return {"run_id": run_id, "skipped": str(exc)}
    return {
        "run_id": run_id,
        "ok": True,
        "records": rep.records,
        "bytes": budget.bytes_read - start,
        "key": key,
    }


def check_pages(run_dir: str, run_id: str, rebases: list[Record], budget: ReadBudget) -> int:
    """Every message page the rebases reference is in the run's attachments and is the page
    its reference names (``store_corrupted`` naming the first that is not, as ``Verify``
    says it); how many were checked. Read at the budget's pace, like the records."""
    payloads = [r.payload for r in rebases]
    chunks: dict[str, tuple[PageRef, ...]] = {}
    for ref in referenced_chunks(payloads):  # the chunks a rebase names, then their pages
        path = os.path.join(run_dir, FileAttachmentStore.KIND, ref.sha256)
        try:
            chunks[ref.sha256] = decode_ref_chunk(ref, budget.read_file(path)).refs
        except FileNotFoundError:
            raise named_page_error(ref_chunk_missing(ref), run_id) from None
        except StoreCorrupted as exc:
            raise named_page_error(exc, run_id) from None
    refs = referenced_pages(payloads, chunk_map_resolver(chunks))
    for ref in refs:
        path = os.path.join(run_dir, FileAttachmentStore.KIND, ref.sha256)
        try:
            raw = budget.read_file(path)
        except FileNotFoundError:
            raise named_page_error(page_missing(ref), run_id) from None
        try:
            decode_page(ref, raw)
        except StoreCorrupted as exc:
            raise named_page_error(exc, run_id) from None
    return len(refs) + len(chunks)


def check_answered(run_dir: str, run_id: str, budget: ReadBudget) -> int:
    """Every chunk the run's fold snapshot names (its page-reference chunks,
    ``journald.core.ref_chunks``, then the chain of its answered ids,
    ``journald.core.answered``) is in the run's attachments and is the chunk its reference
    names (``store_corrupted`` naming the first that is not, as ``Verify`` says it); how many
    were checked. A snapshot that is missing or not JSON names none (it is a cache)."""
    path = os.path.join(run_dir, FileCheckpointStore.KIND, SNAPSHOT_FILE)
    try:
        doc = json.loads(budget.read_file(path))
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return 0
    snap = doc.get("snapshot") if isinstance(doc, dict) else None
    chunks = snapshot_chunks(snap)
    for chunk in chunks:
        try:
            raw = budget.read_file(os.path.join(run_dir, FileAttachmentStore.KIND, chunk.sha256))
        except FileNotFoundError:
            raise named_page_error(ref_chunk_missing(chunk), run_id) from None
        try:
            decode_ref_chunk(chunk, raw)
        except StoreCorrupted as exc:
            raise named_page_error(exc, run_id) from None
    ref: PageRef | None = snapshot_answered_head(snap)
    seen: set[str] = set()
    while ref is not None and ref.sha256 not in seen:
        seen.add(ref.sha256)
        try:
            raw = budget.read_file(os.path.join(run_dir, FileAttachmentStore.KIND, ref.sha256))
        except FileNotFoundError:
            raise named_page_error(chunk_missing(ref), run_id) from None
        try:
            ref = decode_chunk(ref, raw).prev
        except StoreCorrupted as exc:
            raise named_page_error(exc, run_id) from None
    return len(chunks) + len(seen)


def scrub_runs(data_dir: str, ids: Iterable[str], bytes_per_s: int, out: IO[str]) -> None:
    from journald.storage.file.store import FileStore

    store = FileStore(data_dir)
    budget = ReadBudget(bytes_per_s)
    try:
        for line in ids:
            run_id = line.strip()
            if not run_id:
                continue
            cpu = time.process_time()
            out.write(json.dumps(scrub_run(store, run_id, budget)) + "\n")
            out.flush()
            if bytes_per_s > 0:  # at most half a core, in slices no longer than one run's walk
                time.sleep(time.process_time() - cpu)
    finally:
        store.io_pool.stop()


def run_ids(data_dir: str) -> list[str]:
    """Every run directory of the data directory (names that are not run ids are skipped)."""
    sessions = os.path.join(data_dir, "sessions")
    out = []
    for name in sorted(os.listdir(sessions)) if os.path.isdir(sessions) else ():
        try:
            out.append(validate_id(name))
        except JournaldError:
            continue
    return out


def lowest_priority() -> None:
    """The lowest CPU priority (``SCHED_IDLE``: any other thread that wakes, such as the
    daemon's after an fsync, takes the core at once, where a nice-19 thread could finish its
    slice first), and the idle I/O class where the kernel's I/O scheduler honours it (the
    disk serves the scrubber's reads only when nothing else waits)."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    with contextlib.suppress(OSError, AttributeError, ValueError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(IOPRIO_SET.get(platform.machine(), -1), 1, 0, IOPRIO_CLASS_IDLE << 13)


def main(argv: list[str]) -> int:
    data_dir, bytes_per_s = argv[0], int(argv[1])
    lowest_priority()
    scrub_runs(data_dir, run_ids(data_dir), bytes_per_s, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
