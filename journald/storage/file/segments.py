"""On-disk format pieces of the file backend: the manifest, line framing, the strict reader.

The layout, fsync order and recovery rules are specified in docs/design.md#file-backend; this
module holds the parts that are pure format (manifest encoding, line splitting, the hash-chain
checker that names the damaged seq). The durable writes are the disk seam's
(``journald.storage.seam``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from journald.core.errors import JournaldError, StoreCorrupted, VersionUnsupported
from journald.core.records import GENESIS, Record, decode, decode_stored, sha256_hex
from journald.storage.seam import Disk
from journald.storage.verify import record_problem

JOURNAL = "journal.jsonl"
MANIFEST = "manifest.json"
META_CACHE = "meta.json"
SEGMENTS = "segments"
LOCK = "journal.lock"
STAGED = "journal.jsonl.staged"
BROKEN = "journal.jsonl.broken"
MANIFEST_PREFIX = "journald-manifest/"
RUN_FORMAT = 2
"""The format of the runs this daemon writes (docs/design.md#format-identity): 1, no stamp
(a run from before format identity: framed lines, or before line framing legacy ones); 2,
stamped, framed lines. It is the number of the run's manifest format, written before the
run's first framed line; a run of a higher number was written by a newer journald and is
refused, unchanged."""
MANIFEST_FORMAT = f"{MANIFEST_PREFIX}{RUN_FORMAT}"
DIR_MODE = 0o700
FILE_MODE = 0o600


# --- a create undone ----------------------------------------------------------------


def unmake_run_dir(run_dir: str) -> None:
    """Remove the files a create made before it failed, without opening any (the create may
    have failed for want of a descriptor)."""
    for name in (JOURNAL, MANIFEST, LOCK):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(run_dir, name))
    with contextlib.suppress(OSError):
        os.rmdir(run_dir)


# --- manifest ----------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class SegmentInfo:
    """One sealed segment: ``segments/<file>`` holds seqs first_seq..last_seq. ``sha256`` (of
    the whole file) and ``mtime_ns`` (its modification time when sealed) are empty/0 in
    manifests written before they were recorded. Frozen: parsed manifests are cached and
    share their entries (``manifest_cache``)."""

    file: str
    first_seq: int
    last_seq: int
    records: int
    messages: int
    bytes: int
    first_hash: str
    last_hash: str
    first_prev: str
    sha256: str = ""
    mtime_ns: int = 0


@dataclass(slots=True, frozen=True)
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
    run_format: int = RUN_FORMAT
    """The format the manifest was read in (``encode`` always writes ``RUN_FORMAT``); below
    it, an open for append writes the manifest anew before any framed line."""

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

    @property
    def bare(self) -> bool:
        """Whether it says nothing but the run's format (no segments, anchors or pending):
        no evidence that the run ever held records."""
        return not (self.segments or self.anchors or self.pending)

    def anchor_after(self) -> dict[int, Anchor]:
        return {a.after_seq: a for a in self.anchors}

    def active_start(self) -> tuple[int, str]:
        if self.segments:
            return self.segments[-1].last_seq, self.segments[-1].last_hash
        return 0, GENESIS

    def copy(self) -> Manifest:
        """A manifest of its own lists (the entries are frozen, so they are shared)."""
        return Manifest(
            self.generation, list(self.segments), list(self.anchors), self.pending, self.run_format
        )


def read_manifest(run_dir: str, run_id: str) -> Manifest | None:
    """The manifest parsed from its bytes, always (writers, Verify, the scrubber); reads of a
    dormant run take ``manifest_cache.MANIFESTS`` instead."""
    path = os.path.join(run_dir, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return parse_manifest(data, path, run_id)


def parse_manifest(data: bytes, path: str, run_id: str) -> Manifest:
    """The manifest in ``data`` (the bytes of ``path``), or ``StoreCorrupted`` /
    ``VersionUnsupported`` naming it."""
    run_dir = os.path.dirname(path)
    try:
        obj = json.loads(data)
        version = manifest_version(obj.get("format"))
        if version > RUN_FORMAT:
            raise format_too_new(run_id, run_dir, version)
        return Manifest(
            generation=int(obj["generation"]),
            segments=[SegmentInfo(**s) for s in obj["segments"]],
            anchors=[Anchor(**a) for a in obj.get("anchors", [])],
            pending=str(obj.get("pending", "")),
            run_format=version,
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StoreCorrupted(
            f"run {run_id}: {path} is not a readable manifest ({exc}); the run's segment "
            "list is lost, restore the run directory from a backup",
            metadata={"run_id": run_id, "file": path},
        ) from exc


def manifest_version(fmt: object) -> int:
    """The run format a manifest's ``format`` names (``journald-manifest/N``)."""
    if not isinstance(fmt, str) or not fmt.startswith(MANIFEST_PREFIX):
        raise ValueError(f"unknown manifest format {fmt!r}")
    number = fmt[len(MANIFEST_PREFIX) :]
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"unknown manifest format {fmt!r}")
    return int(number)


def format_too_new(run_id: str, run_dir: str, version: int) -> VersionUnsupported:
    return VersionUnsupported(
        f"run {run_id} is stored in run format {version}, written by a newer journald; this "
        f"daemon reads run formats 1 to {RUN_FORMAT}. Nothing was read or changed: serve the "
        "data directory with the journald release that wrote the run (or a newer one); see "
        "deploy/README.md#upgrade-and-downgrade",
        metadata={
            "run_id": run_id,
            "version": version,
            "supported": RUN_FORMAT,
            "file": os.path.join(run_dir, MANIFEST),
        },
    )


def check_format(run_dir: str, run_id: str) -> None:
    """Refuse (``VersionUnsupported``) a run of a newer format, before anything is written;
    an unreadable manifest is left to the read that follows."""
    try:
        with open(os.path.join(run_dir, MANIFEST), "rb") as f:
            fmt = json.loads(f.read()).get("format")
        version = manifest_version(fmt)
    except (OSError, ValueError, AttributeError):
        return
    if version > RUN_FORMAT:
        raise format_too_new(run_id, run_dir, version)


MANIFEST_WRITTEN: list[Callable[[str], None]] = []
"""Called with a manifest's path before and after this process writes it: the parsed-manifest
cache forgets it, so a new file that happens to get the old one's inode, size and times (a
write within one clock tick) is never taken for it."""


def write_manifest(disk: Disk, run_dir: str, manifest: Manifest) -> None:
    path = os.path.join(run_dir, MANIFEST)
    for forget in MANIFEST_WRITTEN:
        forget(path)
    try:
        disk.atomic_write(path, manifest.encode(), failpoint="mid_manifest_write")
    finally:
        for forget in MANIFEST_WRITTEN:
            forget(path)


def message_count(rec: Record) -> int:
    """Messages a record contributes (meta's prompt, one per assistant/tool_result/user,
    a rebase's replacement conversation)."""
    if rec.kind == "meta":
        return 1 if rec.payload.get("prompt") else 0
    if rec.kind == "rebase":
        msgs = rec.payload.get("messages")
        return len(msgs) if isinstance(msgs, list) else 0
    return 1 if rec.kind in ("assistant", "tool_result", "user") else 0


# --- lines ---------------------------------------------------------------------------
#
# A stored line is ``<record bytes> TAB <checksum> LF``: the checksum is the first
# ``CHECK_CHARS`` hex digits of the record's sha256 (its hash, already computed when the
# record was built). Canonical JSON never holds a raw tab, so the first tab of a line ends the
# record. Lines written before the framing existed have no tab and no checksum ("legacy").

CHECK_SEP = b"\t"
CHECK_CHARS = 16
SECTOR = 512  # a power cut loses whole sectors (pages): zero runs start and end on them
_HEX = frozenset(b"0123456789abcdef")
_JSON = json.JSONDecoder()
_NON_NUL = re.compile(rb"[^\0]")


def frame(rec: Record) -> bytes:
    """The stored line of a record: its bytes, a tab, its checksum, a newline."""
    return rec.raw + CHECK_SEP + rec.hash[:CHECK_CHARS].encode("ascii") + b"\n"


def reframe(stored: bytes) -> bytes:
    """A stored line (legacy or framed, without its newline) framed anew, newline included."""
    body, _ = unframe(stored)
    return body + CHECK_SEP + sha256_hex(body)[:CHECK_CHARS].encode("ascii") + b"\n"


def unframe(stored: bytes) -> tuple[bytes, bytes | None]:
    """(record bytes, checksum) of a stored line without its newline; checksum None: a legacy
    line (no tab)."""
    cut = stored.find(CHECK_SEP)
    if cut < 0:
        return stored, None
    return stored[:cut], stored[cut + 1 :]


def checksum_ok(rec: Record, check: bytes | None) -> bool:
    return check is None or check == rec.hash[:CHECK_CHARS].encode("ascii")


def split_complete(data: bytes) -> tuple[list[bytes], int]:
    """Complete (newline-terminated) lines and the byte length they cover."""
    end = data.rfind(b"\n") + 1
    return (data[: end - 1].split(b"\n") if end else []), end


def tail_end(data: bytes, base: int = 0) -> int:
    """How much of an active segment a reader walks; the bytes after it are a torn write.
    ``base``: the file offset ``data`` starts at (a line start; sectors are file offsets).

    Torn means written after the last acknowledgement, as a crash leaves it: a kill leaves a
    prefix of the last write (``torn_prefix`` after the last newline), a power cut can leave
    zero-filled sectors (a NUL run in the first line that is not a record, starting at that
    line or on a sector boundary and ending at the end of the file or on a sector boundary,
    and longer than one byte then: one changed byte is never taken for a lost sector, so no
    single-byte change to acknowledged lines is ever cut as torn). Anything else
    after the last good line (a complete line that fails its checks, a complete record
    followed by other bytes) is damage: it stays in the walk, which reports it."""
    nul = data.find(b"\0")
    if nul >= 0:
        start = data.rfind(b"\n", 0, nul) + 1
        found = _NON_NUL.search(data, nul)
        run_end = found.start() if found else len(data)
        # a lone NUL inside the file is a changed byte, not a lost sector
        lost = run_end == len(data) or ((base + run_end) % SECTOR == 0 and run_end - nul > 1)
        # a run of zeros longer than one byte is never one changed byte, so a whole record
        # (and checksum) before it is a write cut by a lost sector, not an acked line
        whole = run_end - nul > 1
        at_sector = (base + nul) % SECTOR == 0
        if lost and (nul == start or at_sector) and torn_prefix(data[start:nul], whole):
            return start
        return len(data)
    last = data.rfind(b"\n") + 1
    if last < len(data) and torn_prefix(data[last:]):
        return last
    return len(data)


def torn_prefix(part: bytes, whole: bool = True) -> bool:
    """Whether ``part`` (no newline) can be the start of a line cut short by a crash: the
    front of a record's bytes, or a complete record followed by the front of its checksum.
    ``whole``: a complete record and checksum missing only the newline counts too (a kill can
    stop a write one byte short; a zero run starting exactly there is ambiguous, so not)."""
    cut = part.find(CHECK_SEP)
    if cut >= 0:
        check = part[cut + 1 :]
        if len(check) > CHECK_CHARS or (len(check) == CHECK_CHARS and not whole):
            return False
        if not set(check) <= _HEX:
            return False
        return sha256_hex(part[:cut])[: len(check)].encode("ascii") == check
    cut_inside_char = False
    try:
        text = part.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":  # invalid bytes, not a cut character
            return False
        text, cut_inside_char = part[: exc.start].decode("utf-8"), True
    try:
        _, end = _JSON.raw_decode(text)
    except ValueError:
        return True  # an unfinished record
    return whole and not cut_inside_char and end == len(text)


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
    raw: bytes  # the stored line without its newline (framing included)
    partial: bool = False  # the file's last bytes, with no newline (and not a torn write)


def corrupted(run_id: str, pos: Line | None, seq: int, what: str) -> StoreCorrupted:
    where = f"{pos.file} line {pos.line}" if pos else "the manifest"
    return StoreCorrupted(
        f"run {run_id}: {where} (seq {seq}): {what}. The run is damaged and is not read as a "
        "shorter or altered history; restore it from a backup, or move the damaged records "
        f"out with `journald recover {run_id}` (quarantine)",
        metadata={
            "run_id": run_id,
            "file": pos.file if pos else MANIFEST,
            "line": pos.line if pos else 0,
            "seq": seq,
            "reason": what,
        },
    )


class ChainReader:
    """Decode lines in order and check the framing, envelope, seq order and the hash chain.

    The lines are the store's own: every record but the last is decoded without re-encoding
    it (``decode_stored``), since any change to its bytes since they were written changes its
    hash and breaks the chain at the next record (and its checksum, compared for free: the
    hash is computed anyway); the last one has no next record, so its checksum vouches for
    it, and it gets the full canonical check (``decode``), plus the record schema when it is
    a legacy line without a checksum. A ``partial`` line (damaged bytes after the last
    newline, see ``tail_end``) is refused at the seq expected there. A record is therefore
    vouched for only once the line after it was read: consume the reader to its end before
    trusting what it yielded (a sealed segment's last record is also checked against the
    manifest by the caller).
    ``strict`` (verify, recovery) gives every record the full check and the record schema,
    which also catches a record that was written so (a writer bug) rather than changed since.

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
        self._decode = decode_stored
        self._strict = strict
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
        if line.partial:
            raise corrupted(
                self.run_id,
                line,
                expected,
                "the file ends in bytes that are not a torn write (a complete record followed "
                "by other bytes, or a record whose newline changed)",
            )
        last = self._peek() is None
        body, check = unframe(line.raw)
        try:
            rec = decode(body) if last else self._decode(body)
        except JournaldError as exc:
            what = f"not a valid record ({exc.message})"
            raise corrupted(self.run_id, line, expected, what) from None
        if not checksum_ok(rec, check):
            raise corrupted(
                self.run_id,
                line,
                expected,
                "the line's checksum does not match its record bytes (they changed on disk)",
            )
        if self._strict or (last and check is None):
            # a legacy line has no checksum: the schema is all that checks a last one
            problem = record_problem(rec)
            if problem is not None:
                raise corrupted(self.run_id, line, expected, problem)
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
                        vouched = decode_stored(unframe(nxt.raw)[0]).prev == rec.hash
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
    """The lines of ``data`` (from file ``name``), numbered from ``first_line``; bytes after
    the last newline come last as a ``partial`` line (the caller cut a torn write already)."""
    end = data.rfind(b"\n") + 1
    pos, i = 0, first_line
    while pos < end:  # one line at a time: a walk never holds a second copy of the file
        nl = data.index(b"\n", pos)
        yield Line(name, i, data[pos:nl])
        pos, i = nl + 1, i + 1
    if end < len(data):
        yield Line(name, i, data[end:], partial=True)


# --- sealed segments: the structural check ---------------------------------------------


def sealed_facts(path: str) -> tuple[str, int]:
    """(sha256 of the file, its mtime in ns): what a seal records of a segment it lists."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
        return digest.hexdigest(), os.fstat(f.fileno()).st_mtime_ns
