"""The read path of the file backend: consistent snapshots and the checked walk of the chain.

Format, layout and recovery rules: docs/design.md#file-backend (reads take no lock, see
#segments-and-manifest there). Two shortcuts keep reads cheap without changing what a read returns:

* **Reading from a seq inside a segment** starts at that record's line instead of the
  segment's first line when the segment's seqs are consecutive (a sealed segment whose
  manifest entry says so; the active segment when no anchor can fall inside it). The record
  found there must carry that seq and its ``prev`` must be the hash of the line before it,
  else the whole segment is walked as before (so a damaged segment is reported as before).
  Like the earlier segments such a read never opens, the lines it skips are not checked by
  it; a read from seq 1 (the fold of Open or Fold, Verify) walks and checks everything. A
  read from a seq in the active segment (no anchor inside it) reads only its end
  (``read_suffix``: backwards from the end to the line before that seq), checked the same.
* **An open right after a read** (``Open`` folds the run, checks its gates, then opens it
  for append): a read that walked the whole active segment leaves what an open needs of it
  (``ActiveTail``: its figures, first and last record) with the manifest it was read under
  and a digest of its bytes. The open takes them instead of decoding the segment again when
  the manifest it settled and the digest of the bytes it reads back are the same, so a
  resumed run is decoded once. Anything else (a repair, a seal, another writer) walks it.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from journald.core.errors import (
    BackendUnavailable,
    JournaldError,
    SessionNotFound,
    StoreCorrupted,
    VersionUnsupported,
)
from journald.core.records import (
    GENESIS,
    Record,
    sha256_hex,
    validate_id,
)
from journald.storage.base import RunInfo, VerifyReport
from journald.storage.file import manifest_checks, run_info
from journald.storage.file.errors import data_dir_gone, vanished
from journald.storage.file.journal import RECENT, RECENT_BYTES, SegmentStats, read_file
from journald.storage.file.manifest_checks import (
    MANIFESTS,
    SealedChecked,
    missing_active,
    records_missing,
)
from journald.storage.file.run_info import (
    Facts,
    file_facts,
    listed_last_seq,
    stat_last,
    still_at,
    stored_record,
)
from journald.storage.file.segments import (
    JOURNAL,
    MANIFEST,
    SEGMENTS,
    ChainReader,
    Line,
    Manifest,
    SegmentInfo,
    corrupted,
    file_lines,
    message_count,
    read_manifest,
    tail_end,
)
from journald.storage.file.stream import (
    MISSING,
    UNREAD,
    RewrittenWhileRead,
    check_sealed,
    read_suffix,
    sealed_lines,
    sealed_whole,
    skip_to,
)
from journald.storage.info import corrupted_info
from journald.storage.io_pool import yield_to_foreground
from journald.storage.scrub_budget import ReadBudget
from journald.storage.seam import Disk
from journald.storage.verify import VerifyWalk

Files = list[tuple[str, bytes, SegmentInfo | None]]
Records = list[Record]
Infos = list[RunInfo]
TAILS_KEPT = 64  # runs whose last read's ActiveTail waits for an open (two records each)
REREADS_AFTER_REWRITE = 3  # whole reads retried when a prune or recovery rewrote the run


@dataclass(slots=True)
class ActiveTail:
    """What an open for append needs of the active segment: its figures (its manifest entry
    once sealed), its first record (the run's meta when it is seq 1) and its last ``keep``."""

    keep: int = RECENT
    stats: SegmentStats = field(default_factory=SegmentStats)
    first: Record | None = None
    recent: list[Record] = field(default_factory=list)
    read_under: tuple[Any, ...] = ()  # active_key of the manifest the segment was read under
    digest: str = ""  # sha256 of the segment's complete lines (torn tail excluded)

    recent_bytes: int = 0

    def add(self, rec: Record) -> None:
        self.stats.add(rec)
        if self.first is None:
            self.first = rec
        self.recent.append(rec)
        self.recent_bytes += len(rec.raw)
        # trimmed in steps: O(1) per record
        if len(self.recent) > 2 * self.keep or self.recent_bytes > 2 * RECENT_BYTES:
            self._trim()

    def _trim(self) -> None:
        del self.recent[: -self.keep]
        self.recent_bytes = sum(len(r.raw) for r in self.recent)
        while self.recent_bytes > RECENT_BYTES and len(self.recent) > 1:
            self.recent_bytes -= len(self.recent.pop(0).raw)

    def done(self) -> ActiveTail:
        self._trim()
        return self


def active_key(m: Manifest) -> tuple[Any, ...]:
    """What the walk of an active segment depends on besides its bytes: the chain state it
    starts from and the anchors it may jump by (and the generation, bumped by every write)."""
    anchors = tuple((a.after_seq, a.after_hash, a.resume_seq, a.resume_prev) for a in m.anchors)
    return (m.generation, m.pending, *m.active_start(), anchors)


class FileReads:
    """The read half of the file backend: built by ``FileStore`` with the run directories'
    root, the disk seam and how the store logs damage, and shared by its journals and
    maintenance."""

    def __init__(
        self,
        sessions_dir: str,
        disk: Disk,
        log_corrupted: Callable[[StoreCorrupted], None],
    ) -> None:
        self.sessions_dir = sessions_dir
        self.disk = disk
        self._log_corrupted = log_corrupted
        self.segment_opens = 0
        """Sealed segment files opened by reads (lets tests prove paging reads the tail)."""
        self._tails: OrderedDict[str, ActiveTail] = OrderedDict()
        self._tails_lock = threading.Lock()  # reads run on worker threads
        self._damage = run_info.DamageSeen()  # what reads met: List and info show it
        self.sealed = SealedChecked()  # runs whose sealed segments a read stat-checked

    def run_dir(self, run_id: str) -> str:
        return os.path.join(self.sessions_dir, validate_id(run_id))

    def not_found(self, run_id: str) -> JournaldError:
        if data_dir_gone(self.sessions_dir):
            return vanished(self.sessions_dir, run_id)
        return SessionNotFound(
            f"run {run_id} does not exist in {self.sessions_dir}; list runs with `journald ls`",
            metadata={"run_id": run_id},
        )

    def seg_path(self, run_id: str, name: str) -> str:
        return os.path.join(self.sessions_dir, run_id, SEGMENTS, name)

    def chain(
        self,
        run_id: str,
        m: Manifest,
        lines: Iterator[Line],
        start_seq: int,
        start_hash: str,
    ) -> ChainReader:
        pos = None
        if m.segments and start_seq == m.segments[-1].last_seq:
            last = m.segments[-1]
            pos = Line(self.seg_path(run_id, last.file), last.records, b"")
        return ChainReader(run_id, lines, start_seq, start_hash, pos, m.anchor_after())

    def active_tail(self, run_id: str, m: Manifest, path: str, active: bytes) -> ActiveTail:
        """The ``ActiveTail`` of ``active`` (the active segment's complete lines under the
        settled manifest ``m``): the one the last read left if it read these very bytes
        under the same manifest, else one made by walking and checking the chain."""
        with self._tails_lock:
            kept = self._tails.pop(run_id, None)
        if (
            kept is not None
            and kept.read_under == active_key(m)
            and kept.digest == sha256_hex(active)
        ):
            return kept
        tail = ActiveTail()
        start_seq, start_hash = m.active_start()
        for _, rec in self.chain(run_id, m, file_lines(path, active), start_seq, start_hash):
            tail.add(rec)
        return tail.done()

    def keep_tail(self, run_id: str, tail: ActiveTail) -> None:
        with self._tails_lock:
            self._tails[run_id] = tail
            self._tails.move_to_end(run_id)
            while len(self._tails) > TAILS_KEPT:
                self._tails.popitem(last=False)

    def snapshot(
        self,
        run_id: str,
        from_seq: int,
        budget: ReadBudget | None = None,
        whole: bool = False,
        fresh: bool = False,
    ) -> tuple[Manifest, Files, int, str, int]:
        """A consistent view: the files to read (sealed segments needed for ``from_seq`` and
        the active segment without its torn tail) and the chain state before the first. The
        sealed segments it does not read pass the structural check (``SealedChecked``: a stat
        against their manifest entries; the walk checks the others line by line).
        ``budget``: the scrubber's paced reads. The last figure: 0, or the seq of the active
        segment's first line in ``files`` when only its end was read (``read_suffix``: a read
        from a seq near its end; ``whole``: never). ``fresh`` (Verify, the scrubber): the
        manifest parsed from its bytes and every sealed segment it does not walk stat-checked,
        not what an earlier read left (``manifest_checks``)."""
        read = budget.read_file if budget is not None else read_file
        run_dir = self.run_dir(run_id)
        path = os.path.join(run_dir, JOURNAL)
        for _ in range(16):
            if not os.path.isdir(run_dir):
                raise self.not_found(run_id)
            try:
                afd: int | None = self.disk.open(path, os.O_RDONLY)
            except FileNotFoundError:
                afd = None
            try:
                # Verify and the scrubber parse the bytes; every other read reuses the parse
                if fresh:
                    listed, stamp = read_manifest(run_dir, run_id), None
                else:
                    listed, stamp = MANIFESTS.read(run_dir, run_id)
                m = listed or Manifest()
                if listed is not None and not m.pending and afd is None:
                    raise missing_active(run_id, path, m)
                files: Files = []
                start_seq, start_hash = 0, GENESIS
                suffix_seq = 0
                if m.pending:
                    staged = os.path.join(run_dir, m.pending)
                    try:
                        data = self.disk.read(staged)
                        name = staged
                    except FileNotFoundError:
                        data, name = self.disk.read(path), path
                    files.append((name, data[: tail_end(data)], None))
                else:
                    segs = m.segments
                    idx = next((i for i, s in enumerate(segs) if s.last_seq >= from_seq), len(segs))
                    if idx > 0:
                        start_seq, start_hash = segs[idx - 1].last_seq, segs[idx - 1].last_hash
                    for s in segs[idx:]:
                        seg = os.path.join(run_dir, SEGMENTS, s.file)
                        if budget is None:
                            # immutable once listed: read when the walk reaches it, so a read
                            # holds at most a chunk of a sealed segment, not the run
                            files.append((seg, UNREAD, s))
                            continue
                        try:
                            data = read(seg)  # the scrubber's paced read, whole
                        except FileNotFoundError:
                            data = MISSING
                        self.segment_opens += 1
                        files.append((seg, data, s))
                    active = b""
                    base = suffix_seq = 0  # the active segment read from its line of that seq
                    if afd is not None:
                        st = os.fstat(afd)
                        same = bool(segs) and any(
                            st.st_ino == s_st.st_ino and st.st_dev == s_st.st_dev
                            for s_st in stat_last(run_dir, segs)
                        )
                        if not same:
                            a_seq = m.active_start()[0]
                            if (
                                budget is None
                                and not whole
                                and idx == len(segs)
                                and from_seq - 1 > a_seq + 1
                                and not any(a.after_seq >= a_seq for a in m.anchors)
                            ):
                                base, active, suffix_seq = read_suffix(
                                    afd, st.st_size, from_seq - 1
                                )
                            if not suffix_seq:
                                with os.fdopen(os.dup(afd), "rb") as f:
                                    active = f.read()
                            if budget is not None:
                                budget.spend(len(active))
                            if not still_at(path, st):
                                continue  # sealed and replaced since it was opened: again
                    files.append((path, active[: tail_end(active, base)], None))
                walked = {os.path.basename(n) for n, _, i in files if i is not None}
                problem = None
                if not m.pending:
                    problem = self.sealed.problem(run_id, run_dir, m, stamp, walked)
                again = (
                    read_manifest(run_dir, run_id) if fresh else MANIFESTS.manifest(run_dir, run_id)
                ) or Manifest()
                if again.generation == m.generation:
                    if problem is not None:
                        raise problem
                    return m, files, start_seq, start_hash, suffix_seq
            finally:
                if afd is not None:
                    self.disk.close(afd)
        raise BackendUnavailable(
            f"run {run_id} kept changing while it was read; retry",
            metadata={"run_id": run_id},
        )

    def iter_checked(
        self,
        run_id: str,
        from_seq: int,
        where: dict[int, Line] | None = None,
        budget: ReadBudget | None = None,
        digests: dict[str, str] | None = None,
        whole: bool = False,
    ) -> tuple[Manifest, Files, Records]:
        """Read and check a snapshot; records with seq >= ``from_seq``. ``where`` (verify):
        filled with the line each record was read from, and no line is skipped."""
        out: Records = []
        walk = self.walk(run_id, from_seq, where, budget, digests, whole)
        m, files = next(walk)  # type: ignore[misc]
        out.extend(walk)  # type: ignore[arg-type]
        return m, files, out

    def walk(
        self,
        run_id: str,
        from_seq: int,
        where: dict[int, Line] | None = None,
        budget: ReadBudget | None = None,
        digests: dict[str, str] | None = None,
        whole: bool = False,
    ) -> Generator[Record | tuple[Manifest, Files], None, None]:
        """``iter_checked`` a record at a time: (manifest, files), then each record from
        ``from_seq`` as its line is checked (a chunk of a sealed segment in memory at a time),
        then the checks of the whole run (listing floor, segments against the manifest).
        Damage it meets is remembered for ``List`` and ``info`` (``saw_damage``)."""
        manifest = file_facts(os.path.join(self.run_dir(run_id), MANIFEST))
        try:
            yield from self._walk(run_id, from_seq, where, budget, digests, whole)
        except StoreCorrupted as exc:
            self.saw_damage(run_id, manifest, exc)
            raise

    def _walk(
        self,
        run_id: str,
        from_seq: int,
        where: dict[int, Line] | None,
        budget: ReadBudget | None,
        digests: dict[str, str] | None,
        whole: bool,
    ) -> Generator[Record | tuple[Manifest, Files], None, None]:
        floor = listed_last_seq(self.run_dir(run_id))  # before the files: it only grows
        fresh = where is not None or budget is not None
        m, files, start_seq, start_hash, suffix_seq = self.snapshot(
            run_id, from_seq, budget, whole, fresh
        )
        before = 0  # lines of the first file not in this read (only its end was read)
        if suffix_seq:
            first = files[0]
            skip, rest, s_seq, s_hash = skip_to(m, first, from_seq, suffix_seq - 1, "")
            if skip:
                before = suffix_seq - start_seq - 1
                files[0] = (first[0], rest, None)
                start_seq, start_hash = s_seq, s_hash
            else:  # not the line its seq says: the whole segment, walked as before
                m, files, start_seq, start_hash, _ = self.snapshot(
                    run_id, from_seq, whole=True, fresh=fresh
                )
            del first, rest
        yield m, files
        sizes: dict[str, int] = {}

        def data_of(name: str, data: bytes, info: SegmentInfo | None) -> bytes:
            if data is UNREAD and info is not None:
                self.segment_opens += 1
                data = sealed_whole(self.run_dir(run_id), run_id, m, name, info)
            elif info is not None:  # read whole by the snapshot (a scrub)
                check_sealed(run_id, name, data, info)
            sizes[name] = len(data)
            if digests is not None and info is not None:
                digests[name] = sha256_hex(data)
            return data

        def lines_of(name: str, data: bytes, info: SegmentInfo | None) -> Iterator[Line]:
            if data is UNREAD and info is not None:  # a chunk at a time
                self.segment_opens += 1
                return sealed_lines(self.run_dir(run_id), run_id, m, name, info, sizes, digests)
            return file_lines(name, data_of(name, data, info))

        skip = 0
        if before:  # started inside it already: the line after that of seq from_seq - 1
            skip = 1
            head = file_lines(files[0][0], files[0][1], before + skip + 1)
        elif where is None and from_seq > 1:  # the first file whole, to start inside it
            first = (files[0][0], data_of(*files[0]), files[0][2])
            skip, rest, start_seq, start_hash = skip_to(m, first, from_seq, start_seq, start_hash)
            head = file_lines(files[0][0], rest, skip + 1)
            del first, rest
        else:
            head = lines_of(*files[0])
        lines = itertools.chain(
            head, itertools.chain.from_iterable(lines_of(*f) for f in files[1:])
        )
        reader = self.chain(run_id, m, lines, start_seq, start_hash)
        first_info = files[0][2]
        if skip:
            reader.pos = Line(files[0][0], before + skip, b"")
        elif first_info is not None and start_seq:
            prev = m.segments[m.segments.index(first_info) - 1]
            reader.pos = Line(self.seg_path(run_id, prev.file), prev.records, b"")
        active_name, active_data, _ = files[-1]
        # the active segment is whole in this read unless the skip started inside it
        tail = None if m.pending or (skip and len(files) == 1) else ActiveTail(keep=1)
        tally: dict[str, list[Any]] = {files[0][0]: [skip, ""]}
        for n, (line, rec) in enumerate(reader):
            yield_to_foreground(n)
            t = tally.setdefault(line.file, [0, ""])
            t[0] += 1
            t[1] = rec.hash
            if rec.seq >= from_seq:
                yield rec
            if where is not None:
                where[rec.seq] = line
            if tail is not None and line.file == active_name:
                tail.add(rec)
        if reader.seq < floor:
            raise records_missing(run_id, active_name, reader.seq, floor)
        for name, _, info in files:
            if info is None:
                continue
            count, last_hash = tally.get(name, [0, ""])
            size = sizes.get(name, 0)
            if count != info.records or last_hash != info.last_hash or size != info.bytes:
                raise corrupted(
                    run_id,
                    Line(name, count, b""),
                    info.last_seq,
                    f"the segment holds {count} records ({size} bytes) ending in "
                    f"{str(last_hash)[:12]}, the manifest says {info.records} ({info.bytes} "
                    f"bytes) ending in {info.last_hash[:12]}",
                )
        if tail is not None:
            tail.read_under, tail.digest = active_key(m), sha256_hex(active_data)
            self.keep_tail(run_id, tail.done())

    def read_records(self, run_id: str, from_seq: int) -> Records:
        # a whole read hands out nothing until it is done, so a prune or recovery that
        # rewrote the run under it is read again (bounded: each retry sees a newer
        # generation, and a run is rewritten far less often than it is read)
        for _ in range(REREADS_AFTER_REWRITE):
            try:
                _, _, out = self.iter_checked(run_id, from_seq)
                break
            except RewrittenWhileRead:
                continue
        else:
            _, _, out = self.iter_checked(run_id, from_seq)
        if not out and from_seq <= 1:
            raise self.not_found(run_id)
        return out

    def first_record(self, run_id: str, path: str) -> Record:
        with open(path, "rb") as f:
            first = f.readline()
        return stored_record(run_id, Line(path, 1, first.rstrip(b"\n")), 1)

    def info(self, run_id: str) -> RunInfo:
        """The run's listing figures (``journald.storage.file.run_info``): the damage a read
        of this store met in files that have not changed since is raised again, else the
        figures from the ends of the active segment when the run's shape allows, else from
        the whole walk."""
        seen = self.damage_seen(run_id)
        if seen is not None:
            raise seen
        cheap = run_info.info_from_end(self, run_id)
        return cheap if cheap is not None else run_info.info_whole(self, run_id)

    def info_from_end(self, run_id: str) -> RunInfo | None:
        return run_info.info_from_end(self, run_id)

    def info_whole(self, run_id: str) -> RunInfo:
        return run_info.info_whole(self, run_id)

    def saw_damage(self, run_id: str, manifest: Facts, exc: StoreCorrupted) -> None:
        self.sealed.forget(self.run_dir(run_id))  # stat them again, also where it was not
        self._damage.saw(self.run_dir(run_id), run_id, manifest, exc)

    def damage_seen(self, run_id: str) -> StoreCorrupted | None:
        return self._damage.seen(self.run_dir(run_id), run_id)

    def list(self) -> Infos:
        self.disk.step("before_run_list")
        out: Infos = []
        for name in sorted(self.disk.listdir(self.sessions_dir)):
            try:
                validate_id(name)
            except JournaldError:
                continue
            run_dir = os.path.join(self.sessions_dir, name)
            if not os.path.isdir(run_dir) or not manifest_checks.has_records(run_dir):
                continue
            seen = self.damage_seen(name)  # a read met damage in these very files
            cached = (
                corrupted_info(name, seen)
                if seen is not None
                else manifest_checks.cached_info(run_dir, self.sealed)
            )
            if cached is None:
                try:
                    cached = self.info(name)
                except SessionNotFound:
                    continue
                except StoreCorrupted as exc:  # one damaged run does not hide the others
                    self._log_corrupted(exc)
                    cached = corrupted_info(name, exc)
                except VersionUnsupported as exc:  # a newer journald's run, listed unread
                    cached = corrupted_info(name, exc)
            out.append(cached)
        return sorted(out, key=lambda i: i.updated, reverse=True)

    def verify(
        self,
        run_id: str,
        budget: ReadBudget | None = None,
        rebases: Records | None = None,
    ) -> VerifyReport:
        """The files' own checks (framing, checksums, chain, manifest) as every read makes
        them, each sealed segment's digest, then the walk every backend's verify makes, naming
        the file and line. ``budget``: the scrubber's paced reads; ``rebases``: filled with
        the run's rebase records (the scrubber checks their pages without a second read)."""
        where: dict[int, Line] = {}
        read: dict[str, str] = {}  # each sealed segment's sha256, as the walk read it
        try:
            m, _, recs = self.iter_checked(run_id, 1, where, budget, read)
        except StoreCorrupted as found:
            raise manifest_checks.earlier_sealed_damage(self, run_id, found) from None
        if not recs:
            raise self.not_found(run_id)
        if rebases is not None:
            rebases.extend(r for r in recs if r.kind == "rebase")
        manifest_checks.check_segment_files(self, run_id)
        seg_dir = os.path.join(self.run_dir(run_id), SEGMENTS)
        digests = {os.path.basename(n): d for n, d in read.items()}
        for s in m.segments:
            if s.sha256 and digests.get(s.file, s.sha256) != s.sha256:
                raise corrupted(
                    run_id,
                    Line(os.path.join(seg_dir, s.file), 0, b""),
                    s.first_seq,
                    "the sealed segment's bytes no longer have the digest its manifest entry "
                    "recorded when it was sealed",
                )
            inside = [r for r in recs if s.first_seq <= r.seq <= s.last_seq]
            msgs = sum(message_count(r) for r in inside)
            if not inside or inside[0].hash != s.first_hash or msgs != s.messages:
                raise corrupted(
                    run_id,
                    Line(os.path.join(seg_dir, s.file), 1, b""),
                    s.first_seq,
                    "the segment's first record or message count disagrees with the manifest",
                )
        walk = VerifyWalk(run_id, lambda r, seq, what: corrupted(run_id, where[r.seq], seq, what))
        anchors = m.anchor_after()
        for n, rec in enumerate(recs):
            yield_to_foreground(n)
            a = anchors.get(walk.seq)
            jumped = a is not None and (a.after_hash, a.resume_seq, a.resume_prev) == (
                walk.hash,
                rec.seq,
                rec.prev,
            )
            walk.add(rec, jumped)
        return walk.report(len(m.segments) + 1)
