"""Where a read's walk starts inside a segment, and sealed segments as it walks them: a
segment is read when the walk reaches it, and a streaming read takes it a chunk at a time,
so a reader holds at most a chunk of it (docs/design.md#fair-shares). A segment that
vanished because a prune or recovery rewrote the run meanwhile is ``backend_unavailable``
(read again); one missing under the same manifest is damage."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

from journald.core.errors import BackendUnavailable, JournaldError
from journald.core.records import decode_stored, sha256_hex
from journald.storage.file.journal import read_file
from journald.storage.file.segments import (
    Line,
    Manifest,
    SegmentInfo,
    corrupted,
    line_start,
    read_manifest,
    unframe,
)

UNREAD = b"\0unread"  # a sealed segment of a snapshot, read when the walk reaches it
READ_CHUNK_BYTES = 1024 * 1024  # a streamed sealed segment is read in pieces of this size
PARTIAL = "a sealed segment ends in a partial line"


class RewrittenWhileRead(BackendUnavailable):
    """A prune or recovery replaced the run's segments while a walk read them: a read that
    has handed out nothing yet reads again (``FileReads.read_records``); a streamed one that
    has is ``backend_unavailable`` to its caller."""


def segment_gone(
    run_dir: str, run_id: str, m: Manifest, name: str, info: SegmentInfo
) -> JournaldError:
    """The error for a listed segment not found when the walk reached it."""
    again = read_manifest(run_dir, run_id) or Manifest()
    if again.generation != m.generation:  # a prune or recovery replaced it since
        return RewrittenWhileRead(
            f"run {run_id} was rewritten while it was read; read it again",
            metadata={"run_id": run_id},
        )
    what = "a segment listed in the manifest is missing"
    return corrupted(run_id, Line(name, 0, b""), info.first_seq, what)


MISSING = b"\0missing"  # a sealed segment a snapshot did not find


def check_sealed(run_id: str, name: str, data: bytes, info: SegmentInfo) -> None:
    """A sealed segment read whole: present, ending in a complete line."""
    if data == MISSING:
        what = "a segment listed in the manifest is missing"
        raise corrupted(run_id, Line(name, 0, b""), info.first_seq, what)
    if not data.endswith(b"\n"):
        raise corrupted(run_id, Line(name, data.count(b"\n") + 1, b""), info.last_seq, PARTIAL)


def sealed_whole(run_dir: str, run_id: str, m: Manifest, name: str, info: SegmentInfo) -> bytes:
    """A sealed segment's bytes, checked whole (present, ending in a complete line)."""
    try:
        data = read_file(name)
    except FileNotFoundError:
        raise segment_gone(run_dir, run_id, m, name, info) from None
    check_sealed(run_id, name, data, info)
    return data


def sealed_lines(
    run_dir: str,
    run_id: str,
    m: Manifest,
    name: str,
    info: SegmentInfo,
    sizes: dict[str, int],
    digests: dict[str, str] | None = None,
) -> Iterator[Line]:
    """A sealed segment's lines read a chunk at a time (``sizes[name]``: its bytes, once
    read to the end; ``digests[name]``: their sha256, when asked for), with the checks of
    ``sealed_whole`` (a partial last line: at its end)."""
    digest = hashlib.sha256() if digests is not None else None
    try:
        f = open(name, "rb")  # noqa: SIM115 - closed by the with below, in this generator
    except FileNotFoundError:
        raise segment_gone(run_dir, run_id, m, name, info) from None
    with f:
        n, size, rest = 0, 0, b""
        while chunk := f.read(READ_CHUNK_BYTES):
            size += len(chunk)
            if digest is not None:
                digest.update(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for raw in lines:
                n += 1
                yield Line(name, n, raw)
            del lines
        sizes[name] = size
        if digests is not None and digest is not None:
            digests[name] = digest.hexdigest()
    if rest:
        raise corrupted(run_id, Line(name, n + 1, b""), info.last_seq, PARTIAL)


def skip_to(
    m: Manifest,
    first: tuple[str, bytes, SegmentInfo | None],
    from_seq: int,
    start_seq: int,
    start_hash: str,
) -> tuple[int, bytes, int, str]:
    """For a read from ``from_seq``: (lines of the first file to skip, its bytes from the
    first line read, chain seq and hash before that line); nothing skipped when the read
    must walk the whole file."""
    _, data, info = first
    walk_all = 0, data, start_seq, start_hash
    if info is not None:
        if info.last_seq - info.first_seq + 1 != info.records:
            return walk_all  # a quarantine hole inside: seqs are not line numbers
        first_seq = info.first_seq
    elif m.pending or any(a.after_seq >= start_seq for a in m.anchors):
        return walk_all  # an anchored jump may fall inside the active segment
    else:
        first_seq = start_seq + 1
    k = from_seq - first_seq
    at = line_start(data, k - 1) if k > 0 else -1
    if at < 0:
        return walk_all
    before_end = data.find(b"\n", at) + 1
    end = data.find(b"\n", before_end)
    if end < 0:
        return walk_all  # no complete line k
    try:
        rec = decode_stored(unframe(data[before_end:end])[0])
    except JournaldError:
        return walk_all
    if rec.seq != from_seq or rec.prev != sha256_hex(unframe(data[at : before_end - 1])[0]):
        return walk_all
    return k, data[before_end:], from_seq - 1, rec.prev


TAIL_READ_BYTES = 64 * 1024  # a read from a seq near the active segment's end: its first try
NO_SUFFIX = (0, b"", 0)


def read_suffix(fd: int, size: int, before_seq: int) -> tuple[int, bytes, int]:
    """For a read whose first record (``before_seq`` + 1) is near the end of the active
    segment (open as ``fd``, ``size`` bytes, consecutive seqs): (offset, bytes from there to
    the end, seq of the line there), the offset being the start of the line of seq
    ``before_seq``, read backwards from the end in doubling pieces, so a read after a recent
    snapshot costs the records after it, not the segment. ``NO_SUFFIX`` (read it whole, as
    before) when the line is not found by its seq before the front of the file is reached,
    or a line there is not a record: the whole walk then names any damage as it did."""
    want = TAIL_READ_BYTES
    while want < size:
        at = size - want
        data = os.pread(fd, size - at, at)
        nl = data.find(b"\n")
        end = data.find(b"\n", nl + 1)
        if nl < 0 or end < 0:
            want *= 2
            continue
        try:
            seq = decode_stored(unframe(data[nl + 1 : end])[0]).seq
        except JournaldError:
            return NO_SUFFIX
        if seq > before_seq:
            want *= 2
            continue
        start = line_start(data[nl + 1 :], before_seq - seq)
        if start < 0:
            return NO_SUFFIX
        return at + nl + 1 + start, data[nl + 1 + start :], before_seq
    return NO_SUFFIX


def read_end(fd: int, size: int, lines: int = 2) -> tuple[int, bytes]:
    """The end of a segment file (open as ``fd``, ``size`` bytes) from a line start: (its
    offset, the bytes from there to the end), read backwards in doubling pieces until the
    bytes before any torn tail (``tail_end``, applied by the caller to what this returns)
    hold ``lines`` complete lines or the front of the file is reached. What ``Store.info``
    needs of an active segment whose seqs are consecutive: its last lines, not its middle."""
    want = TAIL_READ_BYTES
    while True:
        at = max(0, size - want)
        data = os.pread(fd, size - at, at)
        start = 0 if at == 0 else data.find(b"\n") + 1
        if at == 0 or (start and data.count(b"\n", start) > lines):
            # one line more than asked for: the last may be a torn write the caller cuts
            return at + start, data[start:]
        want *= 2
