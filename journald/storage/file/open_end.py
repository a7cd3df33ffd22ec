"""An open for append of a file-backed run from the end of its active segment
(docs/design.md#recovery, "What an open for append checks").

The writer needs of the active segment: where its complete lines end (the torn-tail cut,
repaired), its figures (``SegmentStats``: count, first and last seq and hash), the run's
first record and a few records from the end (``recent``: idempotent-retry comparisons; a
retry of an older seq reads it back from the run, as it does after any trim). When no
anchor, volume replacement or seal in progress falls inside the segment its seqs are
consecutive, so all of these come from its last lines (``stream.read_end``: 64 KiB first,
doubling) and its first line, with the checks ``run_info.info_from_end`` makes, plus the
checksum and chain of every line read from the end. The message count, which only a walk of
the whole segment gives, is left to the seal (``SegmentStats.counted``), which reads the
segment for its digest anyway. Anything unexpected (or a segment of at most 64 KiB): None,
and ``open_whole`` reads the segment whole, as before, which names any damage.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from journald.core.errors import JournaldError
from journald.core.records import Record
from journald.storage.base import RepairReport
from journald.storage.file.journal import RECENT, RECENT_BYTES, OpenState, SegmentStats
from journald.storage.file.manifest_checks import missing_active, records_missing
from journald.storage.file.run_info import (
    checked_end,
    first_of_active,
    read_active_ends,
    stored_record,
)
from journald.storage.file.segments import (
    JOURNAL,
    RUN_FORMAT,
    SEGMENTS,
    Line,
    Manifest,
    split_complete,
    tail_end,
    write_manifest,
)

if TYPE_CHECKING:
    from journald.storage.file.store import FileStore


def open_from_end(
    store: FileStore, run_id: str, run_dir: str, m: Manifest, floor: int
) -> OpenState | None:
    """``FileStore.open_state`` of a run (locked, settled as ``m``, its sealed segments
    stat-checked; ``floor``: the listing cache's last seq) from the ends of its active
    segment (module doc), the torn tail cut as the whole read cuts it; None: read it whole.
    Damage a read of the store met in these very files sends it to the whole read too, which
    refuses it again where it did before (the whole read checks every line)."""
    a_seq, a_hash = m.active_start()
    if m.pending or any(a.after_seq >= a_seq for a in m.anchors):
        return None
    if store.reads.damage_seen(run_id) is not None:
        return None
    path = os.path.join(run_dir, JOURNAL)
    ends = read_active_ends(store.disk, run_dir, path, m, head_when_whole=False)
    if ends is None:
        return None  # no active file (the whole read says so), or a seal in progress
    base, end, head, _ = ends
    if not base:
        return None  # at most 64 KiB: walked whole and checked line by line, as before
    cut = tail_end(end, base)
    lines, covered = split_complete(end[:cut])
    if covered != cut or len(lines) < 2:
        return None  # bytes after the last line that are not a torn write: damage
    last = checked_end(run_id, path, lines, a_seq)
    first = first_of_active(head, a_seq, a_hash)
    if last is None or first is None or last.seq < floor:
        return None  # the whole read names the damage, or the missing records
    recent = chained(run_id, path, lines, last)
    if recent is None:
        return None
    meta = first if first.seq == 1 else None
    if m.segments:
        try:
            seg = os.path.join(run_dir, SEGMENTS, m.segments[0].file)
            meta = store.reads.first_record(run_id, seg)
        except (FileNotFoundError, JournaldError):
            return None
    records = last.seq - a_seq
    stats = SegmentStats(
        records, 0, first.seq, first.hash, first.prev, last.seq, last.hash, counted=False
    )
    report = None
    if cut < len(end):
        report = store.maintenance.repair_tail(run_id, run_dir, end[cut:], base + cut, records)
        report = RepairReport(report.file, report.dropped_bytes, report.broken_copy, last.seq)
    if m.run_format < RUN_FORMAT:
        # as the whole read: the run's format, before this writer's first framed line
        m = Manifest(m.generation + 1, m.segments, m.anchors)
        write_manifest(store.disk, run_dir, m)
    return OpenState(m, base + cut, stats, last.seq, last.hash, meta, recent, report)


def open_whole(store: FileStore, run_id: str, run_dir: str, m: Manifest, floor: int) -> OpenState:
    """``FileStore.open_state`` from the whole active segment, read and walked line by line
    (or the walk a read of these very bytes just made, ``FileReads.active_tail``): any damage
    in it refuses the open."""
    path = os.path.join(run_dir, JOURNAL)
    try:
        data = store.disk.read(path)
    except FileNotFoundError:
        if m.segments:
            raise missing_active(run_id, path, m) from None
        data = b""
    end = tail_end(data)
    tail = store.reads.active_tail(run_id, m, path, data[:end])  # damage refuses here, unchanged
    stats = tail.stats
    last_seq, last_hash = (stats.last_seq, stats.last_hash) if stats.records else m.active_start()
    if last_seq < floor:
        raise records_missing(run_id, path, last_seq, floor)
    report = None
    if end < len(data):
        report = store.maintenance.repair_tail(
            run_id, run_dir, data[end:], end, data.count(b"\n", 0, end)
        )
        report = RepairReport(report.file, report.dropped_bytes, report.broken_copy, last_seq)
    meta = None
    if m.segments:
        meta = store.reads.first_record(run_id, os.path.join(run_dir, SEGMENTS, m.segments[0].file))
    elif tail.first is not None and tail.first.seq == 1:
        meta = tail.first
    if m.run_format < RUN_FORMAT and last_seq > 0:
        # the run's format, before this writer's first framed line (a run made before
        # format identity, or before line framing, that an older journald may also serve)
        m = Manifest(m.generation + 1, m.segments, m.anchors)
        write_manifest(store.disk, run_dir, m)
    return OpenState(m, end, stats, last_seq, last_hash, meta, tail.recent, report)


def chained(run_id: str, path: str, lines: list[bytes], last: Record) -> list[Record] | None:
    """The records of ``lines`` (the segment's last complete lines, ending in ``last``), each
    checked against its checksum and chained to the one before it, as many from the end as
    the writer keeps (``RECENT``, ``RECENT_BYTES``); None when a line fails (the whole read
    names it)."""
    out: list[Record] = []
    kept = 0
    for raw in reversed(lines):
        if len(out) >= RECENT:
            break
        try:
            rec = stored_record(run_id, Line(path, 0, raw), 0)
        except JournaldError:
            return None
        if out and kept + len(rec.raw) > RECENT_BYTES:
            break
        if out and (out[-1].seq, out[-1].prev) != (rec.seq + 1, rec.hash):
            return None
        out.append(rec)
        kept += len(rec.raw)
    if not out or out[0].hash != last.hash:
        return None
    out.reverse()
    return out
