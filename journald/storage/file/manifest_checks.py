"""The manifest as dormant reads take it, and the checks of a run's files against it that read
no record (docs/design.md#segments-and-manifest, "What a read parses and stats").

* **Parsed once per file** (``ManifestCache``, one per process: ``MANIFESTS``): a read opens
  the manifest and fstats that descriptor; while the file's device, inode, size, mtime and
  ctime are those of the bytes parsed last, the parse is reused (a copy with its own lists;
  the entries are frozen). ctime cannot be set back by ``os.utime``, so bytes changed in place
  with size and mtime restored still change the stamp. Every manifest this process writes is
  forgotten before and after the write (``segments.MANIFEST_WRITTEN``), so a new file that
  gets an old one's inode within one clock tick is never taken for it. Writers, ``Verify`` and
  the scrubber parse the bytes themselves (``segments.read_manifest``).
* **Sealed segments stat-checked once per manifest stamp** (``SealedChecked``, one per store):
  a read that finds them all as sealed (``sealed_problem``) remembers the stamp of the
  manifest it checked them against; later reads under the same manifest skip the stats, until
  a read of the store meets damage in the run. The open for append, Verify and the scrubber
  always check.
* **The structural check** (``sealed_problem``): a stat of each sealed segment against its
  manifest entry, the digest read only when the mtime is not the one sealed.
* The checks a verify and a listing make of the files (``check_segment_files``,
  ``earlier_sealed_damage``, ``cached_info``, ``has_records``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import TYPE_CHECKING

from journald.core.errors import (
    BackendUnavailable,
    JournaldError,
    StoreCorrupted,
    VersionUnsupported,
)
from journald.storage.base import RunInfo
from journald.storage.file.journal import read_file
from journald.storage.file.segments import (
    JOURNAL,
    MANIFEST,
    MANIFEST_WRITTEN,
    META_CACHE,
    SEGMENTS,
    Line,
    Manifest,
    corrupted,
    parse_manifest,
    read_manifest,
    sealed_facts,
)

if TYPE_CHECKING:
    from journald.storage.file.reads import FileReads

Stamp = tuple[int, int, int, int, int]
"""A manifest file's st_dev, st_ino, st_size, st_mtime_ns and st_ctime_ns."""
MANIFESTS_KEPT = 256  # runs whose parsed manifest is kept (~100 KB each at 200 segments)
SEALED_KEPT = 4096  # runs whose sealed segments' check is remembered (one stamp each)


def stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ManifestCache:
    """Parsed manifests by path, each with the stamp of the file it was parsed from (LRU)."""

    def __init__(self, kept: int = MANIFESTS_KEPT) -> None:
        self._kept: OrderedDict[str, tuple[Stamp, Manifest]] = OrderedDict()
        self._lock = threading.Lock()  # reads run on worker threads
        self._max = kept
        self.parses = 0
        """Manifests parsed from their bytes (lets tests prove a dormant read reuses one)."""

    def read(self, run_dir: str, run_id: str) -> tuple[Manifest | None, Stamp | None]:
        """The run's manifest (None: no manifest file) and the stamp of the file it is."""
        path = os.path.join(run_dir, MANIFEST)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None, None
        try:
            stamp = stamp_of(os.fstat(fd))
            with self._lock:
                kept = self._kept.get(path)
                if kept is not None and kept[0] == stamp:
                    self._kept.move_to_end(path)
                    return kept[1].copy(), stamp
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            settled = stamp_of(os.fstat(fd)) == stamp  # not written in place while read
        finally:
            os.close(fd)
        m = parse_manifest(b"".join(chunks), path, run_id)
        with self._lock:
            self.parses += 1
            if settled:
                self._kept[path] = (stamp, m)
                self._kept.move_to_end(path)
                while len(self._kept) > self._max:
                    self._kept.popitem(last=False)
        return m.copy(), stamp

    def manifest(self, run_dir: str, run_id: str) -> Manifest | None:
        return self.read(run_dir, run_id)[0]

    def forget(self, path: str) -> None:
        with self._lock:
            self._kept.pop(path, None)

    def forget_run(self, run_dir: str) -> None:
        self.forget(os.path.join(run_dir, MANIFEST))


MANIFESTS = ManifestCache()
MANIFEST_WRITTEN.append(MANIFESTS.forget)


class SealedChecked:
    """The manifest stamp each run's sealed segments last passed the stat check under."""

    def __init__(self, kept: int = SEALED_KEPT) -> None:
        self._kept: OrderedDict[str, Stamp] = OrderedDict()
        self._lock = threading.Lock()
        self._max = kept
        self.checks = 0
        """Stat checks of a run's sealed segments made (lets tests prove they are skipped)."""

    def problem(
        self,
        run_id: str,
        run_dir: str,
        m: Manifest,
        stamp: Stamp | None,
        skip: Collection[str] = (),
    ) -> StoreCorrupted | None:
        """``sealed_problem`` of ``m`` (read from the file of ``stamp``), None at once when
        every sealed segment passed it under that very manifest file before. Only a check of
        all of them (``skip`` empty) is remembered."""
        with self._lock:
            if stamp is not None and self._kept.get(run_dir) == stamp:
                self._kept.move_to_end(run_dir)
                return None
            self.checks += 1
        problem = sealed_problem(run_id, run_dir, m, skip)
        if problem is None and not skip and stamp is not None:
            with self._lock:
                self._kept[run_dir] = stamp
                self._kept.move_to_end(run_dir)
                while len(self._kept) > self._max:
                    self._kept.popitem(last=False)
        return problem

    def forget(self, run_dir: str) -> None:
        with self._lock:
            self._kept.pop(run_dir, None)


def sealed_problem(
    run_id: str, run_dir: str, m: Manifest, skip: Collection[str] = (), *, digests: bool = True
) -> StoreCorrupted | None:
    """What a stat of every sealed segment (but those in ``skip``: a read that walks them
    checks them line by line) finds wrong against its manifest entry, without reading
    segment bodies: a segment missing, or of another size than sealed (cut, extended,
    replaced). A segment whose mtime is not the one sealed was written to since: its bytes
    are read and compared with the digest sealed. Sealed segments never change, so any of
    these is damage (docs/design.md#segments-and-manifest). ``digests=False``: presence and
    size only (a walk that reads the bytes next names a changed record at its own line)."""
    for s in m.segments:
        if s.file in skip:
            continue
        path = os.path.join(run_dir, SEGMENTS, s.file)
        pos = Line(path, 0, b"")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return corrupted(
                run_id, pos, s.first_seq, "a segment listed in the manifest is missing"
            )
        if st.st_size != s.bytes:
            return corrupted(
                run_id,
                pos,
                s.first_seq,
                f"the sealed segment is {st.st_size} bytes, its manifest entry says {s.bytes} "
                "(a sealed segment never changes: it was cut, extended or replaced)",
            )
        seen = (path, st.st_ino, st.st_size, st.st_mtime_ns, s.sha256)
        if not digests:
            continue
        if s.sha256 and s.mtime_ns and st.st_mtime_ns != s.mtime_ns and not _vouched(seen):
            try:
                digest = sealed_facts(path)[0]
            except FileNotFoundError:
                return corrupted(
                    run_id, pos, s.first_seq, "a segment listed in the manifest is missing"
                )
            if digest == s.sha256:  # a copy (a restore keeps the bytes, not the mtime)
                _vouch(seen)
            else:
                return corrupted(
                    run_id,
                    pos,
                    s.first_seq,
                    "the sealed segment was written to since it was sealed: its bytes no "
                    "longer have the digest its manifest entry recorded",
                )
    return None


_VOUCHED: OrderedDict[tuple[str, int, int, int, str], None] = OrderedDict()
_VOUCHED_LOCK = threading.Lock()  # reads run on worker threads
VOUCHED_KEPT = 65536
"""Segment files (path, inode, size, mtime) whose digest was read and matched although their
mtime is not the one sealed (restored from a backup): read once per process, not per open."""


def _vouched(seen: tuple[str, int, int, int, str]) -> bool:
    with _VOUCHED_LOCK:
        return seen in _VOUCHED


def _vouch(seen: tuple[str, int, int, int, str]) -> None:
    with _VOUCHED_LOCK:
        _VOUCHED[seen] = None
        while len(_VOUCHED) > VOUCHED_KEPT:
            _VOUCHED.popitem(last=False)


def has_records(run_dir: str) -> bool:
    """Whether the run ever held records: a listing cache (written after its first
    record, see ``listed_last_seq``), a non-empty journal, or a manifest that says more
    than the run's format (which a create writes before its first record). A run whose
    journal went missing still exists, and reads report the damage."""
    if os.path.exists(os.path.join(run_dir, META_CACHE)):
        return True
    try:
        if os.path.getsize(os.path.join(run_dir, JOURNAL)) > 0:
            return True
    except FileNotFoundError:
        pass
    try:
        m = MANIFESTS.manifest(run_dir, os.path.basename(run_dir))
    except JournaldError:
        return True  # unreadable or of a newer format: there, and reads say why
    return m is not None and not m.bare


def cached_info(run_dir: str, sealed: SealedChecked) -> RunInfo | None:
    """The listing row from ``meta.json`` if it still describes the files (and the sealed
    segments pass the structural check), else None."""
    try:
        obj = json.loads(read_file(os.path.join(run_dir, META_CACHE)))
        st = os.stat(os.path.join(run_dir, JOURNAL))
        m, stamp = MANIFESTS.read(run_dir, "")
        gen = m.generation if m else 0
        if (
            obj["journal_ino"] != st.st_ino
            or obj["journal_size"] != st.st_size
            or obj.get("journal_mtime_ns") != st.st_mtime_ns  # a write since, of any size
            or obj["generation"] != gen
        ):
            return None
        if m is not None and not m.pending and sealed.problem("", run_dir, m, stamp):
            return None  # listed afresh: the read names the damage
        return RunInfo(**obj["info"])
    except (OSError, ValueError, TypeError, KeyError, StoreCorrupted, VersionUnsupported):
        return None


def check_segment_files(reads: FileReads, run_id: str) -> None:
    """Every file in ``segments/`` is listed in the manifest or is a seal in progress
    (the active file linked under the next name), checked against one manifest: a seal
    by another writer between the reads makes the manifest change, and the check runs
    again."""
    run_dir = reads.run_dir(run_id)
    seg_dir = os.path.join(run_dir, SEGMENTS)
    active = os.path.join(run_dir, JOURNAL)
    for _ in range(16):
        m = read_manifest(run_dir, run_id) or Manifest()
        if m.pending:
            return  # the segments are being removed: the staged volume is the run
        listed = {s.file for s in m.segments}
        unlisted = None
        for name in sorted(reads.disk.listdir(seg_dir)) if os.path.isdir(seg_dir) else ():
            seg = os.path.join(seg_dir, name)
            with contextlib.suppress(FileNotFoundError):
                sealing = name == f"{len(m.segments) + 1:06d}.jsonl" and os.path.samefile(
                    seg, active
                )
                if name not in listed and not sealing:
                    unlisted = seg
                    break
        again = read_manifest(run_dir, run_id) or Manifest()
        if again.generation != m.generation:
            continue
        if unlisted is not None:
            raise corrupted(
                run_id, Line(unlisted, 0, b""), 0, "a segment file not listed in the manifest"
            )
        return
    raise BackendUnavailable(
        f"run {run_id} kept changing while it was verified; retry",
        metadata={"run_id": run_id},
    )


def earlier_sealed_damage(reads: FileReads, run_id: str, found: StoreCorrupted) -> StoreCorrupted:
    """``found``, or a sealed segment before its file that is missing or of another size:
    a segment cut at a line boundary reads as whole lines, and the walk names the next
    file's seq gap instead of the segment that was cut."""
    run_dir = reads.run_dir(run_id)
    listed = read_manifest(run_dir, run_id)
    if listed is None or listed.pending:
        return found
    problem = sealed_problem(run_id, run_dir, listed, digests=False)
    if problem is None:
        return found

    def place(err: StoreCorrupted) -> tuple[int, str]:
        path = str(err.metadata.get("file", ""))
        in_segments = os.path.basename(os.path.dirname(path)) == SEGMENTS
        return (0, os.path.basename(path)) if in_segments else (1, path)

    return problem if place(problem) < place(found) else found


def records_missing(run_id: str, name: str, last_seq: int, floor: int) -> StoreCorrupted:
    return corrupted(
        run_id,
        Line(name, 0, b""),
        last_seq + 1,
        f"acknowledged records are missing: the run's listing recorded seq {floor}, its "
        f"files end at seq {last_seq}",
    )


def missing_active(run_id: str, path: str, m: Manifest) -> StoreCorrupted:
    return corrupted(
        run_id,
        Line(path, 0, b""),
        m.active_start()[0] + 1,
        "the active segment is missing (the manifest lists the run's sealed segments; the "
        "records after them were in this file)",
    )
