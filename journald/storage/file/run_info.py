"""A file-backed run's listing figures (``Store.info``: count, size, first and last record)
and what a read remembers of the damage it met (docs/design.md#file-backend, "What
Store.info and List check").

* **From the end** (``info_from_end``): the active segment's seqs are consecutive when no
  anchor (a prune's or a recovery's jump) falls inside it, so its record count is its last
  complete line's seq less the seq it starts after. It reads the segment's last lines
  (``stream.read_end``, 64 KiB first, the torn-tail rule applied as a read from near the end
  applies it) and its first line: a dormant read, whose cache key this is, costs the same at
  any length of the segment. Anything unexpected: ``info_whole``.
* **Whole** (``info_whole``): the walk of the whole active segment, every line checked.
* **Damage seen** (``DamageSeen``): the ``store_corrupted`` a read of the store met, kept
  with a stat of the run's files; while they are unchanged ``info`` raises it again and
  ``List`` shows the run ``corrupted``, though ``info`` no longer reads the middle of the
  segment where the damage may be.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from journald.core.errors import JournaldError, StoreCorrupted
from journald.core.records import Record, decode, decode_stored
from journald.storage.base import RunInfo
from journald.storage.file.journal import read_file
from journald.storage.file.manifest_checks import MANIFESTS
from journald.storage.file.segments import (
    JOURNAL,
    MANIFEST,
    META_CACHE,
    SEGMENTS,
    Line,
    Manifest,
    SegmentInfo,
    checksum_ok,
    corrupted,
    split_complete,
    tail_end,
    unframe,
)
from journald.storage.file.stream import read_end
from journald.storage.info import run_info_from

if TYPE_CHECKING:
    from journald.storage.file.reads import FileReads
    from journald.storage.seam import Disk

HEAD_READ_BYTES = 4096  # the active segment's first line, read from its front (doubling)
DAMAGE_KEPT = 1024  # runs whose damage a read met, kept while their files stay unchanged

Facts = tuple[int, int, int] | None  # a file's inode, size and mtime; None: not there
DamageKey = tuple[Facts, Facts, tuple[tuple[str, Facts], ...]]


def read_active_ends(
    disk: Disk, run_dir: str, path: str, m: Manifest, head_when_whole: bool = True
) -> tuple[int, bytes, bytes, os.stat_result] | None:
    """The active segment's end (``stream.read_end``: its file offset and bytes), its first
    line's bytes (read from the front, doubling; skipped when the end read is the whole file
    and not ``head_when_whole``) and its stat. None: no active file, or a seal in progress
    (the active file is the last sealed one)."""
    try:
        fd = disk.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if m.segments and any(
            (st.st_ino, st.st_dev) == (s.st_ino, s.st_dev) for s in stat_last(run_dir, m.segments)
        ):
            return None
        base, end = read_end(fd, st.st_size)
        head = b""
        if base or head_when_whole:
            head = os.pread(fd, min(st.st_size, HEAD_READ_BYTES), 0)
            while b"\n" not in head and len(head) < st.st_size:
                head = os.pread(fd, min(st.st_size, 2 * len(head)), 0)
    finally:
        disk.close(fd)
    return base, end, head, st


def info_from_end(reads: FileReads, run_id: str) -> RunInfo | None:
    """``info_whole``'s figures from the ends of the active segment (module doc). Checked:
    the last line's record and checksum, the line before it (checksum, chain, seq), the seq
    of the first line read against the count, the segment's first line against the chain
    state the manifest ends on, the listing's floor, and the sealed segments' stat against
    the manifest (as every read). Not checked: the lines between; the whole walk of a read
    from seq 1, ``Verify`` and the scrubber check them. None (walk it whole, which names any
    damage) when an anchor, a volume replacement or a seal in progress is there, the end
    read is the whole segment (at most 64 KiB: walked as before) or a check fails."""
    run_dir = reads.run_dir(run_id)
    path = os.path.join(run_dir, JOURNAL)
    if not os.path.isdir(run_dir):
        raise reads.not_found(run_id)
    floor = listed_last_seq(run_dir)
    listed, stamp = MANIFESTS.read(run_dir, run_id)
    m = listed or Manifest()
    a_seq, a_hash = m.active_start()
    if m.pending or any(a.after_seq >= a_seq for a in m.anchors):
        return None
    ends = read_active_ends(reads.disk, run_dir, path, m)
    if ends is None:
        return None
    base, end, head, st = ends
    if not base:
        return None  # read whole anyway (at most 64 KiB): walked and checked line by line
    end = end[: tail_end(end, base)]
    lines, covered = split_complete(end)
    if covered != len(end) or len(lines) < 2:
        return None  # bytes after the last line that are not a torn write: damage
    last = checked_end(run_id, path, lines, a_seq)
    first = first_of_active(head, a_seq, a_hash)
    if last is None or first is None:
        return None
    if m.segments:
        try:
            first = reads.first_record(run_id, reads.seg_path(run_id, m.segments[0].file))
        except (FileNotFoundError, StoreCorrupted):
            return None
    if first.seq != 1 or last.seq < floor:
        return None
    if reads.sealed.problem(run_id, run_dir, m, stamp) is not None:
        return None
    again = MANIFESTS.manifest(run_dir, run_id) or Manifest()
    if again.generation != m.generation or not still_at(path, st):
        return None
    count = sum(s.records for s in m.segments) + (last.seq - a_seq)
    size = sum(s.bytes for s in m.segments) + base + len(end)
    return run_info_from(run_id, first, last, count, size)


def checked_end(run_id: str, path: str, lines: list[bytes], a_seq: int) -> Record | None:
    """The last record of ``lines`` (two or more complete lines that end the active segment
    after seq ``a_seq``) if it passes the checks a walk makes of a last line, follows the
    line before it, and the seq of the first line read fits the count (seqs consecutive)."""
    try:
        body, check = unframe(lines[-1])
        if check is None:
            return None  # a legacy line: only the schema checks it, as the walk does
        last = stored_record(run_id, Line(path, 0, lines[-1]), 0)
        body, check = unframe(lines[-2])
        before = decode_stored(body)
        front = decode_stored(unframe(lines[0])[0]).seq
    except JournaldError:
        return None
    if not checksum_ok(before, check) or (last.seq, last.prev) != (before.seq + 1, before.hash):
        return None
    if front != last.seq - len(lines) + 1 or front <= a_seq + 1:
        return None  # not consecutive, or the lines read are not the segment's end
    return last


def first_of_active(head: bytes, a_seq: int, a_hash: str) -> Record | None:
    """The active segment's first record (from ``head``, its first bytes) if it follows the
    chain state the manifest ends on (seq ``a_seq``, hash ``a_hash``)."""
    nl = head.find(b"\n")
    if nl < 0:
        return None
    try:
        body, check = unframe(head[:nl])
        rec = decode(body)
    except JournaldError:
        return None
    if not checksum_ok(rec, check) or rec.seq != a_seq + 1 or rec.prev != a_hash:
        return None
    return rec


def info_whole(reads: FileReads, run_id: str) -> RunInfo:
    """The listing figures from the walk of the whole active segment, checked line by line
    (counting its lines); the last sealed segment's last line (an empty active segment, just
    sealed) is read from its end."""
    m, files, _ = reads.iter_checked(run_id, 1 << 62, whole=True)  # it counts the lines
    active_name, active, _ = files[-1]
    lines, _ = split_complete(active)  # the walk refused anything else
    last = first = None
    if lines:
        last = stored_record(run_id, Line(active_name, len(lines), lines[-1]), 0)
        if m.pending or not m.segments:
            first = stored_record(run_id, Line(active_name, 1, lines[0]), 1)
    if m.segments and not m.pending:
        try:
            first = reads.first_record(run_id, reads.seg_path(run_id, m.segments[0].file))
            if last is None:
                s = m.segments[-1]
                seg = reads.seg_path(run_id, s.file)
                last = stored_record(
                    run_id, Line(seg, s.records, last_line(reads, seg)), s.last_seq
                )
        except FileNotFoundError as exc:
            raise StoreCorrupted(
                f"run {run_id}: segment {os.path.basename(str(exc.filename))} is listed in "
                "the manifest but missing; restore the run from a backup",
                metadata={"run_id": run_id, "file": str(exc.filename)},
            ) from exc
    if first is None or last is None:
        raise reads.not_found(run_id)
    count = sum(s.records for s in m.segments) + len(lines)
    size = sum(s.bytes for s in m.segments) + len(active)
    return run_info_from(run_id, first, last, count, size)


def last_line(reads: FileReads, path: str) -> bytes:
    """A sealed segment's last complete line, read from its end (``FileNotFoundError`` when
    it is gone)."""
    fd = reads.disk.open(path, os.O_RDONLY)
    try:
        _, data = read_end(fd, os.fstat(fd).st_size, 1)
    finally:
        reads.disk.close(fd)
    lines, _ = split_complete(data)
    return lines[-1] if lines else b""


class DamageSeen:
    """The damage reads of one store met, by run, with the key of the run's files then."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[DamageKey, StoreCorrupted]] = OrderedDict()
        self._lock = threading.Lock()  # reads run on worker threads

    def saw(self, run_dir: str, run_id: str, manifest: Facts, exc: StoreCorrupted) -> None:
        """Keep ``exc``, met by a read of the run that began under the manifest file
        ``manifest`` (its stat), with the key of the run's files now; nothing when the
        manifest changed since (a prune or recovery rewrote the run under that read)."""
        key = damage_key(run_dir)
        if key[0] != manifest:
            return
        with self._lock:
            self._kept[run_id] = (key, exc)
            self._kept.move_to_end(run_id)
            while len(self._kept) > DAMAGE_KEPT:
                self._kept.popitem(last=False)

    def seen(self, run_dir: str, run_id: str) -> StoreCorrupted | None:
        """The damage kept for the run if its files still have the key they had then (any
        write, seal, prune, recovery or copy from a backup changes it: forgotten)."""
        with self._lock:
            kept = self._kept.get(run_id)
        if kept is None:
            return None
        if damage_key(run_dir) == kept[0]:
            return kept[1]
        with self._lock:
            if self._kept.get(run_id) is kept:
                del self._kept[run_id]
        return None


def file_facts(path: str) -> Facts:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def damage_key(run_dir: str) -> DamageKey:
    """What the run's files look like to a stat: its manifest, its active segment and each
    file in ``segments/``."""
    seg_dir = os.path.join(run_dir, SEGMENTS)
    try:
        names = sorted(os.listdir(seg_dir))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return (
        file_facts(os.path.join(run_dir, MANIFEST)),
        file_facts(os.path.join(run_dir, JOURNAL)),
        tuple((n, file_facts(os.path.join(seg_dir, n))) for n in names),
    )


def listed_last_seq(run_dir: str) -> int:
    """The last seq the run's listing cache (``meta.json``) recorded, 0 if none. The writer
    writes it only after those records were acknowledged and only a prune or a recovery
    (which keep the run's last seq or raise it) removes it, so however stale, the run still
    holds that seq: a floor that notices acknowledged records gone missing."""
    try:
        obj = json.loads(read_file(os.path.join(run_dir, META_CACHE)))
        seq = obj["info"]["last_seq"]
    except (OSError, ValueError, TypeError, KeyError):
        return 0
    return seq if type(seq) is int else 0


def still_at(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` is still the file ``st`` describes (not replaced since)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    return (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev)


def stat_last(run_dir: str, segs: list[SegmentInfo]) -> list[os.stat_result]:
    try:
        return [os.stat(os.path.join(run_dir, SEGMENTS, segs[-1].file))]
    except FileNotFoundError:
        return []


def stored_record(run_id: str, line: Line, seq: int) -> Record:
    """One stored line decoded and checked against its checksum, or ``StoreCorrupted`` naming
    the run, the file, the line and ``seq`` (the seq expected there, 0 when unknown)."""
    body, check = unframe(line.raw)
    try:
        rec = decode(body)
    except JournaldError as exc:
        raise corrupted(run_id, line, seq, f"not a valid record ({exc.message})") from None
    if not checksum_ok(rec, check):
        raise corrupted(run_id, line, seq or rec.seq, "the line's checksum does not match")
    return rec
