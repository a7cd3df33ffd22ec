"""Fault tests of the file backend's tail: damage to acknowledged records is never a tear.

Every byte of the last two records of a run is flipped (one bit, cycling with the offset, or
all eight), each of their newlines is turned into each of the 255 other byte values, and the
active segment is deleted, one case at a time: a fresh store must report each as
``StoreCorrupted`` naming the run and the file (load, verify and open alike), never serve a
shorter or altered history, and change nothing on disk. Only bytes written after the last
acknowledgement are ever cut as a torn write (tests/storage/file/test_file_recovery.py).

In-process (no daemon) so that the ~2,000 cases take seconds; ``-s`` prints the figures.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from journald.core.errors import JournaldError, StoreCorrupted
from journald.core.records import Record
from journald.storage.file.journal import FileJournal
from journald.storage.file.segments import JOURNAL, META_CACHE
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, assistant_payload, result_payload, text, tool_use

RUN = "tail-run"


def records() -> list[Record]:
    """A run whose last two records carry spaces, '@' and multi-byte UTF-8 (bytes that a flip
    can turn into NUL, newline or tab), ending on a tool result."""
    b = JournalBuilder(RUN, prompt="fix the bug — carefully")
    b.add("assistant", assistant_payload([text("looking @ it"), tool_use("t1")], 1))
    b.add("tool_result", result_payload("t1", "naïve output: 3 × 4 = 12 ✓"))
    b.add("assistant", assistant_payload([text("next — read b"), tool_use("t2")], 2))
    b.add("tool_result", result_payload("t2", "done @ 100% ✓"))
    return b.records


async def pristine(data: Path, segment_max_records: int) -> tuple[bytes, list[Record]]:
    recs = records()
    store = FileStore(data, segment_max_records=segment_max_records)
    journal = await store.create(recs[0])
    for rec in recs[1:]:
        await journal.append([rec])
    await journal.close()
    return (data / "sessions" / RUN / JOURNAL).read_bytes(), recs


def last_lines(active: bytes, count: int) -> list[tuple[int, int]]:
    """(start, end incl. newline) of the last ``count`` lines of ``active``."""
    ends = [i + 1 for i, c in enumerate(active) if c == 0x0A]
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends, strict=True))[-count:]


async def outcome(store: FileStore, recs: list[Record], seq: int = 0) -> str:
    """'detected' when load, verify and open all refuse with ``StoreCorrupted`` naming the run,
    a file of it and ``seq`` (if given); else what they did ('shorter', 'altered', 'same',
    'opened', an error code)."""
    reads = await asyncio.gather(
        store.load(RUN), store.verify(RUN), store.open(RUN), return_exceptions=True
    )
    seen = set()
    for got in reads:
        if isinstance(got, StoreCorrupted):
            meta = got.metadata
            named = meta.get("run_id") == RUN and meta.get("file", "").startswith(
                store.sessions_dir
            )
            named = named and (not seq or meta.get("seq") == str(seq))
            seen.add("detected" if named else "detected-unnamed")
        elif isinstance(got, JournaldError):
            seen.add(got.code)
        elif isinstance(got, BaseException):
            raise got
        elif isinstance(got, FileJournal):
            await got.close()
            seen.add("opened")
        elif isinstance(got, list):
            raws, want = [r.raw for r in got], [r.raw for r in recs]
            seen.add("shorter" if len(raws) < len(want) else "altered" if raws != want else "same")
    return "+".join(sorted(seen)) if seen != {"detected"} else "detected"


def tally_line(name: str, tally: Counter[str]) -> str:
    total = sum(tally.values())
    return f"{name}: {tally['detected']}/{total} detected ({dict(tally)})"


def flips(active: bytes, lines: list[tuple[int, int]], every_newline_value: bool) -> list[Flip]:
    """One flip per byte (the flipped bit cycles with the offset; 0xFF every 9th byte) and,
    with ``every_newline_value``, each newline turned into each of the 255 other bytes."""
    out: list[Flip] = []
    for line, (start, end) in enumerate(lines):
        for at in range(start, end):
            if active[at] == 0x0A and every_newline_value:
                out.extend(Flip("newline", at, mask, line) for mask in range(1, 256))
            else:
                mask = 0xFF if at % 9 == 8 else 1 << (at % 9)
                out.append(Flip("newline" if active[at] == 0x0A else "byte", at, mask, line))
    return out


@dataclass(frozen=True, slots=True)
class Flip:
    kind: str
    at: int
    mask: int
    line: int  # 0: the last but one record, 1: the last


@pytest.mark.parametrize(
    ("segment_max_records", "every_newline_value"),
    [(1000, True), (3, False)],
    ids=["one-volume", "after-a-seal"],
)
async def test_every_flip_in_the_last_two_records_is_reported_as_corruption(
    tmp_path: Path, segment_max_records: int, every_newline_value: bool
) -> None:
    data = tmp_path / "data"
    active, recs = await pristine(data, segment_max_records)
    path = data / "sessions" / RUN / JOURNAL
    run_dir = path.parent
    before = sorted(os.listdir(run_dir))
    lines = last_lines(active, 2)
    assert len(lines) == 2, "both records must be in the active segment"
    tallies: dict[str, Counter[str]] = {"byte": Counter(), "newline": Counter()}
    failures: list[tuple[Flip, str]] = []
    fd = os.open(path, os.O_RDWR)
    try:
        for flip in flips(active, lines, every_newline_value):
            os.pwrite(fd, bytes([active[flip.at] ^ flip.mask]), flip.at)
            store = FileStore(data, segment_max_records=segment_max_records)
            got = await outcome(store, recs, recs[flip.line - 2].seq)
            tallies[flip.kind][got] += 1
            if got != "detected":
                failures.append((flip, got))
            assert (
                os.pread(fd, len(active) + 1, 0)
                == active[: flip.at] + bytes([active[flip.at] ^ flip.mask]) + active[flip.at + 1 :]
            ), "a read or a refused open changed the file"
            assert sorted(os.listdir(run_dir)) == before, "a refused open left files"
            os.pwrite(fd, active[flip.at : flip.at + 1], flip.at)
    finally:
        os.close(fd)
    print()
    for kind, tally in tallies.items():
        print(tally_line(f"segment_max_records={segment_max_records} {kind} flips", tally))
    assert not failures, f"{len(failures)} flips not reported as corruption: {failures[:10]}"


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "writer-killed"])
@pytest.mark.parametrize("segment_max_records", [1000, 2], ids=["one-volume", "segmented"])
async def test_a_deleted_active_segment_is_corruption_not_a_shorter_history(
    tmp_path: Path, segment_max_records: int, closed: bool
) -> None:
    data = tmp_path / "data"
    recs = records()
    store = FileStore(data, segment_max_records=segment_max_records)
    journal = await store.create(recs[0])
    run_dir = data / "sessions" / RUN
    cache = run_dir / META_CACHE
    at_create = cache.read_bytes() if cache.exists() else None
    for rec in recs[1:]:
        await journal.append([rec])
    await journal.close()
    if not closed:  # a writer killed after its create leaves the listing of that moment
        if at_create is None:
            cache.unlink()
        else:
            cache.write_bytes(at_create)
    (run_dir / JOURNAL).unlink()
    store = FileStore(data, segment_max_records=segment_max_records)
    assert await outcome(store, recs) == "detected"
    assert await store.exists(RUN)  # so an Open resumes (and refuses) instead of re-creating
    assert not (run_dir / JOURNAL).exists(), "a refused open re-created the journal"
    if segment_max_records > len(recs):  # nothing survives to rebuild the run from
        with pytest.raises(StoreCorrupted, match="meta record is damaged or missing"):
            await store.recover(RUN, tmp_path / "q")
        return
    report = await store.recover(RUN, tmp_path / "q")  # records the hole, moves nothing
    assert report.quarantined == 0
    assert report.rebase is not None
    assert report.rebase.seq > recs[-1].seq, "an acknowledged seq would be reused"
    survived = [r.raw for r in await store.load(RUN)]
    assert survived[-1] == report.rebase.raw
    assert survived[:-1] == [r.raw for r in recs[: report.hole_from - 1]]
    assert report.hole_to >= recs[-1].seq  # every seq the lost segment may have held


async def test_a_flipped_newline_between_the_last_two_records_keeps_their_seqs_reserved(
    tmp_path: Path,
) -> None:
    """The issue's case: the two records merge into one line; nothing may append at their
    seqs (the open refuses until recovery, and recovery writes above them)."""
    data = tmp_path / "data"
    active, recs = await pristine(data, 1000)
    path = data / "sessions" / RUN / JOURNAL
    start, _ = last_lines(active, 1)[0]
    flipped = bytearray(active)
    flipped[start - 1] ^= 0x01
    path.write_bytes(flipped)
    store = FileStore(data)
    with pytest.raises(StoreCorrupted) as err:
        await store.open(RUN)
    assert err.value.metadata["seq"] == str(recs[-2].seq)
    assert "line" in err.value.message
    assert not list(path.parent.glob("journal.jsonl.broken*"))
    report = await store.recover(RUN, tmp_path / "q")
    assert [p["seq"] for p in report.positions] == [recs[-2].seq]
    loaded = await store.load(RUN)
    assert loaded[-1].kind == "rebase"
    assert loaded[-1].seq > recs[-1].seq, "an acknowledged seq was reused"
    assert loaded[-1].payload["reason"] == "quarantine"
    assert loaded[-1].payload["covered"] == {"from_seq": recs[-2].seq, "to_seq": recs[-1].seq}
    assert [r.raw for r in loaded[:-1]] == [r.raw for r in recs[:-2]]
