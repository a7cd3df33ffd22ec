"""On-disk format pieces of the file backend: manifest, durable file helpers, the strict reader.

The layout, fsync order and recovery rules are specified in ``journald.storage.file``; this
module holds the parts that are pure format (manifest encoding, line splitting, the hash-chain
checker that names the damaged seq) plus the small durable-write helpers.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from journald import failpoints
from journald.errors import BackendUnavailable, JournaldError, StorageFull, StoreCorrupted
from journald.records import GENESIS, Record, decode, decode_stored

JOURNAL = "journal.jsonl"
MANIFEST = "manifest.json"
META_CACHE = "meta.json"
SEGMENTS = "segments"
LOCK = "journal.lock"
STAGED = "journal.jsonl.staged"
BROKEN = "journal.jsonl.broken"
MANIFEST_FORMAT = "journald-manifest/1"
DIR_MODE = 0o700
FILE_MODE = 0o600


# --- durable file helpers ----------------------------------------------------------------


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes, offset: int) -> int:
    """pwrite every byte of ``data`` at ``offset``; returns the end offset."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        offset += n
        view = view[n:]
    return offset


def atomic_write(path: str, data: bytes, *, failpoint: str = "", sync: bool = True) -> None:
    """temp file (unique name), write, fsync, rename over ``path``, fsync the directory."""
    directory = os.path.dirname(path)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        try:
            write_all(fd, data, 0)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if failpoint and failpoints.ARMED:
            failpoints.hit(failpoint)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(directory)


def storage_error(
    exc: OSError, run_id: str, where: str, seq: int, retry: str = ""
) -> JournaldError:
    """Map an OS error of a write to the journald error the caller sees (``retry``: what to
    retry once the disk is fixed; the append at ``seq`` by default)."""
    name = errno.errorcode.get(exc.errno or 0, "EIO")
    meta: dict[str, object] = {"run_id": run_id, "errno": name, "path": where}
    if seq:
        meta["seq"] = seq
    retry = retry or f"the append at seq {seq}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(
            f"run {run_id}: the disk holding {where} is full ({name}); nothing was written. "
            f"Free space, then retry {retry}",
            metadata=meta,
        )
    return BackendUnavailable(
        f"run {run_id}: writing {where} failed ({name}: {exc.strerror}); nothing was "
        f"acknowledged. Check the disk, then retry {retry}",
        metadata=meta,
    )


# --- manifest ----------------------------------------------------------------------------


@dataclass(slots=True)
class SegmentInfo:
    """One sealed segment: ``segments/<file>`` holds seqs first_seq..last_seq."""

    file: str
    first_seq: int
    last_seq: int
    records: int
    messages: int
    bytes: int
    first_hash: str
    last_hash: str
    first_prev: str


@dataclass(slots=True)
class Anchor:
    """A legitimate break in the seq/hash chain: the record after ``after_seq`` (whose hash is
    ``after_hash``) is ``resume_seq``, whose ``prev`` is ``resume_prev``. Written by prune
    (reason ``prune``: seqs dropped_from..dropped_to were cut after a checkpoint) and by
    recovery (reason ``quarantine``: the damaged records were moved out of the run)."""

    after_seq: int
    after_hash: str
    resume_seq: int
    resume_prev: str
    reason: str
    dropped_from: int
    dropped_to: int


@dataclass(slots=True)
class Manifest:
    generation: int = 0
    segments: list[SegmentInfo] = field(default_factory=list)
    anchors: list[Anchor] = field(default_factory=list)
    pending: str = ""
    """Non-empty while a volume replacement (prune/recover) is committed but not settled:
    the name of the staged file that *is* the whole volume until it is renamed in."""

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "generation": self.generation,
            "segments": [asdict(s) for s in self.segments],
            "anchors": [asdict(a) for a in self.anchors],
        }
        if self.pending:
            obj["pending"] = self.pending
        return json.dumps(obj, sort_keys=True, indent=1).encode() + b"\n"

    def anchor_after(self) -> dict[int, Anchor]:
        return {a.after_seq: a for a in self.anchors}

    def active_start(self) -> tuple[int, str]:
        if self.segments:
            return self.segments[-1].last_seq, self.segments[-1].last_hash
        return 0, GENESIS


def read_manifest(run_dir: str, run_id: str) -> Manifest | None:
    path = os.path.join(run_dir, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data)
        if obj.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {obj.get('format')!r}")
        return Manifest(
            generation=int(obj["generation"]),
            segments=[SegmentInfo(**s) for s in obj["segments"]],
            anchors=[Anchor(**a) for a in obj.get("anchors", [])],
            pending=str(obj.get("pending", "")),
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise StoreCorrupted(
            f"run {run_id}: {path} is not a readable manifest ({exc}); the run's segment "
            "list is lost, restore the run directory from a backup",
            metadata={"run_id": run_id, "file": path},
        ) from exc


def write_manifest(run_dir: str, manifest: Manifest) -> None:
    atomic_write(os.path.join(run_dir, MANIFEST), manifest.encode(), failpoint="mid_manifest_write")


def message_count(rec: Record) -> int:
    """Messages a record contributes (meta's prompt, one per assistant/tool_result/user,
    a rebase's replacement conversation)."""
    if rec.kind == "meta":
        return 1 if rec.payload.get("prompt") else 0
    if rec.kind == "rebase":
        msgs = rec.payload.get("messages")
        return len(msgs) if isinstance(msgs, list) else 0
    return 1 if rec.kind in ("assistant", "tool_result", "user") else 0


# --- lines -------------------------------------------------------------------------------


def split_complete(data: bytes) -> tuple[list[bytes], int]:
    """Complete (newline-terminated) lines and the byte length they cover."""
    end = data.rfind(b"\n") + 1
    return (data[: end - 1].split(b"\n") if end else []), end


def split_active(data: bytes) -> tuple[list[bytes], int]:
    """Lines of the active segment without its torn tail, and the length they cover.

    The tail is torn when bytes follow the last newline (an incomplete line) or when the last
    complete line is not JSON at all (an unparsable final line)."""
    end = active_end(data)
    return (data[: end - 1].split(b"\n") if end else []), end


def active_end(data: bytes) -> int:
    """``split_active``'s length without splitting every line (only the last is parsed)."""
    end = data.rfind(b"\n") + 1
    if end:
        start = data.rfind(b"\n", 0, end - 1) + 1
        try:
            json.loads(data[start : end - 1])
        except ValueError:
            return start
    return end


def line_start(data: bytes, index: int) -> int:
    """Offset of line ``index`` (0-based) of ``data``, or -1 when it has no such line."""
    at = 0
    for _ in range(index):  # memchr per line: far cheaper than splitting them all
        at = data.find(b"\n", at) + 1
        if not at:
            return -1
    return at if at < len(data) else -1


@dataclass(slots=True)
class Line:
    file: str
    line: int  # 1-based line number in file
    raw: bytes


def corrupted(run_id: str, pos: Line | None, seq: int, what: str) -> StoreCorrupted:
    where = f"{pos.file} line {pos.line}" if pos else "the manifest"
    return StoreCorrupted(
        f"run {run_id}: {where} (seq {seq}): {what}. The journal is damaged before its end and "
        "is not read as a shorter history; restore it from a backup or run recovery "
        "(quarantine) to move the damaged records out",
        metadata={
            "run_id": run_id,
            "file": pos.file if pos else MANIFEST,
            "line": pos.line if pos else 0,
            "seq": seq,
        },
    )


class ChainReader:
    """Decode lines in order and check the envelope, seq order and the hash chain.

    The lines are the store's own: every record but the last is decoded without re-encoding
    it (``decode_stored``), since any change to its bytes since they were written changes its
    hash and breaks the chain at the next record; the last one has no next record, so it gets
    the full canonical check (``decode``). A record is therefore vouched for only once the
    line after it was read: consume the reader to its end before trusting what it yielded
    (a sealed segment's last record is also checked against the manifest by the caller).
    ``strict`` (verify, recovery) gives every record the full check, which also catches a
    non-canonical record that was written so (a writer bug) rather than changed since.

    On a chain break between records j-1 and j, the damaged record is named by looking one
    record ahead: if record j is vouched for (its hash is the next record's ``prev``) or is
    the last one, record j-1's bytes changed; otherwise record j is the damaged one.
    """

    def __init__(
        self,
        run_id: str,
        lines: Iterator[Line],
        start_seq: int,
        start_hash: str,
        start_pos: Line | None,
        anchors: dict[int, Anchor],
        strict: bool = False,
    ) -> None:
        self.run_id = run_id
        self._decode = decode if strict else decode_stored
        self._lines = lines
        self._peeked: Line | None = None
        self.seq = start_seq
        self.hash = start_hash
        self.pos = start_pos
        self._anchors = anchors

    def _next_line(self) -> Line | None:
        if self._peeked is not None:
            out, self._peeked = self._peeked, None
            return out
        return next(self._lines, None)

    def _peek(self) -> Line | None:
        if self._peeked is None:
            self._peeked = next(self._lines, None)
        return self._peeked

    def __iter__(self) -> Iterator[tuple[Line, Record]]:
        return self

    def __next__(self) -> tuple[Line, Record]:
        line = self._next_line()
        if line is None:
            raise StopIteration
        expected = self.seq + 1
        last = self._peek() is None
        try:
            rec = decode(line.raw) if last else self._decode(line.raw)
        except JournaldError as exc:
            what = f"not a valid record ({exc.message})"
            raise corrupted(self.run_id, line, expected, what) from None
        anchor = self._anchors.get(self.seq)
        jumped = (
            anchor is not None
            and anchor.after_hash == self.hash
            and rec.seq == anchor.resume_seq
            and rec.prev == anchor.resume_prev
        )
        if not jumped:
            if rec.seq != expected:
                raise corrupted(
                    self.run_id, line, expected, f"seq {rec.seq} found where {expected} belongs"
                )
            if rec.prev != self.hash:
                nxt = self._peek()
                vouched = True
                if nxt is not None:
                    try:
                        vouched = decode_stored(nxt.raw).prev == rec.hash
                    except JournaldError:
                        vouched = False
                if vouched and self.pos is not None:
                    raise corrupted(
                        self.run_id,
                        self.pos,
                        self.seq,
                        f"hash chain breaks: record {self.seq}'s bytes do not match the hash "
                        f"seq {rec.seq} recorded for it",
                    )
                raise corrupted(
                    self.run_id,
                    line,
                    rec.seq,
                    f"hash chain breaks: prev does not match the hash of seq {self.seq}",
                )
        self.seq, self.hash, self.pos = rec.seq, rec.hash, line
        return line, rec


def file_lines(name: str, data: bytes, first_line: int = 1) -> Iterator[Line]:
    """The complete lines of ``data`` (from file ``name``), numbered from ``first_line``."""
    lines, _ = split_complete(data)
    for i, raw in enumerate(lines, first_line):
        yield Line(name, i, raw)
