"""Sealed segments as a read walks them: a segment is read when the walk reaches it, and a
streaming read takes it a chunk at a time, so a reader holds at most a chunk of it
(docs/design.md#fair-shares). A segment that vanished because a prune or recovery rewrote
the run meanwhile is ``backend_unavailable`` (read again); one missing under the same
manifest is damage."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from journald.core.errors import BackendUnavailable, JournaldError
from journald.storage.file_journal import read_file
from journald.storage.segments import Line, Manifest, SegmentInfo, corrupted, read_manifest

UNREAD = b"\0unread"  # a sealed segment of a snapshot, read when the walk reaches it
READ_CHUNK_BYTES = 1024 * 1024  # a streamed sealed segment is read in pieces of this size
PARTIAL = "a sealed segment ends in a partial line"


def segment_gone(
    run_dir: str, run_id: str, m: Manifest, name: str, info: SegmentInfo
) -> JournaldError:
    """The error for a listed segment not found when the walk reached it."""
    again = read_manifest(run_dir, run_id) or Manifest()
    if again.generation != m.generation:  # a prune or recovery replaced it since
        return BackendUnavailable(
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
