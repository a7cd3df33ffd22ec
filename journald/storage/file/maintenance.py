"""Explicit maintenance of the file backend: prune, recovery (quarantine), tail repair.

Format, layout and recovery rules: docs/design.md#file-backend (#recovery, #prune).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from journald.clock import utc_ts
from journald.core.errors import JournaldError, StoreCorrupted
from journald.core.fold import QUARANTINE, fold, rebuilt_after_quarantine
from journald.core.pages import (
    Paged,
    PageRef,
    cut,
    decode_page,
    page_missing,
)
from journald.core.rebase_chunks import (
    PagedRebase,
    RebaseResolver,
    rebase_payload,
    referenced_pages,
)
from journald.core.records import GENESIS, Record, decode, make_record, sha256_hex
from journald.core.ref_chunks import decode_ref_chunk, ref_chunk_missing
from journald.core.schema import validate_record
from journald.storage.base import QuarantineReport, RecordCheck, RepairReport
from journald.storage.file.journal import unique_path
from journald.storage.file.run_info import listed_last_seq
from journald.storage.file.segments import (
    BROKEN,
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    META_CACHE,
    SEGMENTS,
    STAGED,
    Anchor,
    ChainReader,
    Line,
    Manifest,
    corrupted,
    file_lines,
    frame,
    read_manifest,
    reframe,
    tail_end,
    unframe,
    write_manifest,
)

if TYPE_CHECKING:
    from journald.storage.file.store import FileStore
    from journald.storage.seam import Disk

T = TypeVar("T")
ATTACHMENTS = "attachments"  # the run's attachment directory (checkpoint_store.FileAttachmentStore)
log = logging.getLogger("journald.storage.file")
Damaged = list[tuple[Line, int, str]]  # a damaged line, the seq expected there, the reason
Lines = list[Line]
PrePrune = Callable[[str, Sequence[Record]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PruneReport:
    run_id: str
    pruned: bool
    rebase_seq: int = 0
    dropped_from: int = 0
    dropped_to: int = 0
    dropped_records: int = 0
    kept_records: int = 0


def run_pages(disk: Disk, run_dir: str) -> RebaseResolver:
    """Pages, and the page-reference chunks a rebase names, read from the run's attachment
    directory (docs/design.md#message-pages)."""

    def resolve(ref: PageRef) -> list[dict[str, Any]]:
        try:
            raw = disk.read(os.path.join(run_dir, ATTACHMENTS, ref.sha256))
        except FileNotFoundError:
            raise page_missing(ref) from None
        return decode_page(ref, raw)

    def chunk(ref: PageRef) -> tuple[PageRef, ...]:
        try:
            raw = disk.read(os.path.join(run_dir, ATTACHMENTS, ref.sha256))
        except FileNotFoundError:
            raise ref_chunk_missing(ref) from None
        return decode_ref_chunk(ref, raw).refs

    return RebaseResolver(resolve, chunk)


def store_pages(disk: Disk, run_dir: str, paged: Paged | PagedRebase) -> None:
    """Write ``paged``'s pages (and a rebase's chunks, after them) into the run's attachment
    directory (the ones it lacks)."""
    rebase = paged if isinstance(paged, PagedRebase) else PagedRebase(paged, ())
    blobs = [(r.sha256, rebase.paged.data[r.sha256]) for r in rebase.paged.refs]
    blobs += [(c.ref.sha256, c.raw) for c in rebase.chunks]
    if not blobs:
        return
    d = os.path.join(run_dir, ATTACHMENTS)
    if not os.path.isdir(d):
        disk.mkdir(d, DIR_MODE)
    for sha, raw in blobs:
        path = os.path.join(d, sha)
        if not os.path.exists(path):
            disk.atomic_write(path, raw)


def holds_live_state(records: Sequence[Record], cut_seq: int) -> bool:
    """Whether a state record before ``cut_seq`` is still the latest value of its key: a
    rebase replaces the conversation, never framework state, so such a prune would lose it."""
    # state only: the conversation (and the pages a rebase references) plays no part
    only = [r for r in records if r.kind in ("meta", "state")]
    return any(v.seq < cut_seq for _, _, v in fold(only).state_entries())


class FileMaintenance:
    """Prune and recovery of a ``FileStore``: it works under the store's run locks, settles
    runs the store's way and reads through the store's reads, so it is built with the store
    (``FileStore.maintenance``)."""

    def __init__(self, store: FileStore) -> None:
        self.store = store

    async def prune(self, run_id: str, *, before: PrePrune | None = None) -> PruneReport:
        """Rewrite a run to its meta record plus everything from its latest rebase onward
        (nothing is pruned while a state record before that rebase still holds a live value).

        ``before(run_id, records)`` runs after the run is locked and read, before anything
        changes: the checkpoint store hooks its ``pre_prune`` checkpoint here (its failure
        aborts the prune). Refused with ``Locked`` while the run is open for append.
        """
        run_dir = self.store.run_dir(run_id)
        how = {"run_id": run_id, "action": "pruning the run"}
        lock = await self.store.checked(self.store.lock_existing, run_id, run_dir, **how)
        try:
            await self.store.checked(self.store.open_state, run_id, run_dir, **how)
            records = await self.store.checked(self.store.reads.read_records, run_id, 1, **how)
            rebases = [r for r in records if r.kind == "rebase"]
            if (
                not records
                or not rebases
                or rebases[-1].seq <= 2
                or records[1].seq >= rebases[-1].seq
                or holds_live_state(records, rebases[-1].seq)
            ):
                return PruneReport(run_id, False)
            if before is not None:
                await before(run_id, records)
            rb = rebases[-1]
            meta = records[0]
            kept = [meta] + [r for r in records if r.seq >= rb.seq]
            m = await self.store.checked(read_manifest, run_dir, run_id, **how) or Manifest()
            anchors = [a for a in m.anchors if a.after_seq >= rb.seq]
            anchors.insert(
                0, Anchor(meta.seq, meta.hash, rb.seq, rb.prev, "prune", meta.seq + 1, rb.seq - 1)
            )
            lines = [frame(r) for r in kept]
            await self.store.checked(
                self._replace_volume, run_id, run_dir, m, lines, anchors, **how
            )
            return PruneReport(
                run_id, True, rb.seq, meta.seq + 1, rb.seq - 1, len(records) - len(kept), len(kept)
            )
        finally:
            self.store.disk.close(lock)

    def _replace_volume(
        self,
        run_id: str,
        run_dir: str,
        m: Manifest,
        lines: Sequence[bytes],
        anchors: Sequence[Anchor],
    ) -> None:
        staged = os.path.join(run_dir, STAGED)
        fd = self.store.disk.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            self.store.disk.write_all(fd, b"".join(lines), 0)
            self.store.disk.fsync(fd)
        finally:
            self.store.disk.close(fd)
        self.store.disk.fsync_dir(run_dir)
        self.store.disk.step("mid_prune_stage")
        nm = Manifest(m.generation + 1, [], list(anchors), STAGED)
        write_manifest(self.store.disk, run_dir, nm)  # the commit point
        self.store.disk.step("mid_prune_rename")
        self.store.finish_replace(run_dir, run_id, nm)
        with contextlib.suppress(FileNotFoundError):
            self.store.disk.unlink(os.path.join(run_dir, META_CACHE))

    async def recover(
        self,
        run_id: str,
        quarantine_dir: str | os.PathLike[str] | None = None,
        *,
        check: RecordCheck | None = None,
    ) -> QuarantineReport:
        """Recovery mode: move damaged interior records out of the run (see module doc).
        ``check``: what the rebase recording the hole must pass before anything moves (the
        daemon's gate: schema and ``--max-record-bytes``); without one, the schema alone."""
        qdir = str(quarantine_dir if quarantine_dir is not None else self.store.quarantine_dir)
        run_dir = self.store.run_dir(run_id)
        how = {"run_id": run_id, "action": "recovering the run"}
        lock = await self.store.checked(self.store.lock_existing, run_id, run_dir, qdir, **how)
        try:
            return await self.store.checked(
                self._recover, run_id, run_dir, qdir, check or validate_record, **how
            )
        finally:
            self.store.disk.close(lock)

    def _recover(
        self, run_id: str, run_dir: str, qdir: str, check: RecordCheck
    ) -> QuarantineReport:
        floor = listed_last_seq(run_dir)
        m = self.store.settle(run_id, run_dir)
        path = os.path.join(run_dir, JOURNAL)
        lost_active = bool(m.segments) and not os.path.exists(path)
        data = self.store.disk.read(path) if os.path.exists(path) else b""
        end = tail_end(data)
        report = QuarantineReport(run_id)
        if end < len(data):
            rep = self.repair_tail(run_id, run_dir, data[end:], end, data.count(b"\n", 0, end))
            report.repaired = rep.sentence()
        lines: Lines = []
        for s in m.segments:
            seg = os.path.join(run_dir, SEGMENTS, s.file)
            lines.extend(file_lines(seg, self.store.disk.read(seg)))
        lines.extend(file_lines(path, data[:end]))
        anchors = {a.after_seq: a for a in m.anchors}
        bad = self._find_damaged(run_id, lines, anchors)
        survivors = [rec for rec in map(_decoded, lines) if rec is not None]
        last = survivors[-1] if survivors else None
        # seqs a damaged line held (two when a changed newline merged two records) stay
        # taken, as do those the listing recorded: no acknowledged seq is ever reused
        taken = [seq + max(0, ln.raw.count(b'"seq":') - 1) for ln, seq, _ in bad]
        end_seq = last.seq if last else 0
        gone = [seq for _, seq, _ in bad] + ([end_seq + 1, floor] if floor > end_seq else [])
        if lost_active:  # it held fewer records than a seal takes: keep all those seqs
            gone += [end_seq + 1, end_seq + self.store.segment_max_records]
        # every page a surviving rebase references must be there and whole (a missing one
        # is store_corrupted naming it: recovery cannot rebuild what it does not have)
        resolve = run_pages(self.store.disk, run_dir)
        try:  # the chunks a rebase names first, then every page
            rebases = [r.payload for r in survivors if r.kind == "rebase"]
            for ref in referenced_pages(rebases, resolve.chunks):
                resolve(ref)
        except StoreCorrupted as exc:
            exc.metadata["run_id"] = run_id
            raise
        if not gone:
            report.last_seq = end_seq
            return report
        if last is None or survivors[0].kind != "meta":
            raise corrupted(
                run_id,
                bad[0][0] if bad else Line(path, 0, b""),
                1,
                "the run's meta record is damaged or missing, and recovery needs it to rebuild "
                "the run; restore the run directory from a backup",
            )
        report.hole_from, report.hole_to = min(gone), max(gone + taken)
        rebuilt = cut(rebuilt_after_quarantine(survivors, resolve))
        covered = {"from_seq": report.hole_from, "to_seq": report.hole_to}
        payload, paged = rebase_payload({"reason": QUARANTINE, "covered": covered}, rebuilt)
        rebase = make_record(
            max(last.seq, report.hole_to) + 1, "rebase", payload, last.hash, utc_ts()
        )
        check(rebase)
        store_pages(self.store.disk, run_dir, paged)  # before the rebase that references them
        if rebase.seq != last.seq + 1:  # the run ended in the hole: jump it to the rebase
            anchors[last.seq] = Anchor(
                last.seq, last.hash, rebase.seq, last.hash, QUARANTINE, last.seq + 1, rebase.seq - 1
            )
        if bad:
            self._keep_evidence(run_id, qdir, bad, report)
        live = {rec.seq for rec in survivors}
        used = sorted(
            (a for a in anchors.values() if a.after_seq in live or a.after_seq == 0),
            key=lambda a: a.after_seq,
        )
        kept = [reframe(ln.raw) for ln in lines] + [frame(rebase)]
        self._replace_volume(run_id, run_dir, m, kept, used)
        report.rebase, report.last_seq = rebase, rebase.seq
        log.warning(
            "run %s: recovery recorded the hole (seqs %d..%d) as rebase seq %d",
            run_id,
            report.hole_from,
            report.hole_to,
            rebase.seq,
        )
        return report

    def _find_damaged(self, run_id: str, lines: Lines, anchors: dict[int, Anchor]) -> Damaged:
        """Take the damaged lines out of ``lines`` (one strict walk per damaged line) and
        anchor the chain across each hole: (line, seq expected there, reason) each."""
        bad: Damaged = []
        for _ in range(len(lines) + 1):
            reader = ChainReader(run_id, iter(lines), 0, GENESIS, None, anchors, strict=True)
            try:
                for _ in reader:
                    pass
                return bad
            except StoreCorrupted as exc:
                at = [
                    i
                    for i, ln in enumerate(lines)
                    if ln.file == exc.metadata["file"] and str(ln.line) == exc.metadata["line"]
                ]
                if not at:
                    raise  # not a record's line: nothing recovery can move out
                idx = at[0]
                reason = exc.metadata.get("reason", exc.message)
                bad.append((lines.pop(idx), int(exc.metadata["seq"]), reason))
                pred = _decoded(lines[idx - 1]) if idx > 0 else None
                succ = _decoded(lines[idx]) if idx < len(lines) else None
                if succ is not None:
                    p_seq, p_hash = (pred.seq, pred.hash) if pred else (0, GENESIS)
                    anchors[p_seq] = Anchor(
                        p_seq, p_hash, succ.seq, succ.prev, QUARANTINE, p_seq + 1, succ.seq - 1
                    )
        return bad

    def _keep_evidence(
        self, run_id: str, qdir: str, bad: Damaged, report: QuarantineReport
    ) -> None:
        """Copy each damaged line, as stored, to a new directory under ``qdir`` (fsynced)."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        # a new directory even if the clock stepped back onto an earlier recovery's stamp
        out = unique_path(os.path.join(qdir, f"{run_id}-{stamp}"))
        os.makedirs(out, DIR_MODE)
        for i, (ln, seq, reason) in enumerate(bad, 1):
            digest = sha256_hex(ln.raw)
            name = f"{i:04d}-seq{seq}-{digest[:16]}.bad"
            fd = self.store.disk.open(
                os.path.join(out, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE
            )
            try:
                self.store.disk.write_all(fd, ln.raw, 0)
                self.store.disk.fsync(fd)
            finally:
                self.store.disk.close(fd)
            report.positions.append(
                {
                    "file": ln.file,
                    "line": ln.line,
                    "seq": seq,
                    "sha256": digest,
                    "bytes": len(ln.raw),
                    "evidence": name,
                    "reason": reason,
                }
            )
            log.warning(
                "run %s: quarantined %s line %d (seq %d: %s) to %s",
                run_id,
                ln.file,
                ln.line,
                seq,
                reason,
                os.path.join(out, name),
            )
        self.store.disk.fsync_dir(out)
        report.quarantined = len(bad)
        report.directory = out

    def repair_tail(
        self, run_id: str, run_dir: str, torn: bytes, end: int, lines: int
    ) -> RepairReport:
        """Cut the active segment's torn tail (``torn``, the bytes after offset ``end``,
        which ``lines`` complete lines precede), keeping a copy of it beside the run."""
        path = os.path.join(run_dir, JOURNAL)
        broken = unique_path(os.path.join(run_dir, BROKEN))
        fd = self.store.disk.open(broken, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            self.store.disk.write_all(fd, torn, 0)
            self.store.disk.fsync(fd)
        finally:
            self.store.disk.close(fd)
        self.store.disk.fsync_dir(run_dir)
        self.store.disk.step("mid_repair")
        fd = self.store.disk.open(path, os.O_WRONLY)
        try:
            self.store.disk.ftruncate(fd, end)
            self.store.disk.fsync(fd)
        finally:
            self.store.disk.close(fd)
        log.warning(
            "run %s: repaired a torn write: cut %d bytes after line %d of %s (written after "
            "the last acknowledgement: a crash mid-write) and kept them in %s",
            run_id,
            len(torn),
            lines,
            path,
            broken,
        )
        return RepairReport(path, len(torn), broken, 0)


def _decoded(line: Line) -> Record | None:
    try:
        return decode(unframe(line.raw)[0])
    except JournaldError:
        return None
