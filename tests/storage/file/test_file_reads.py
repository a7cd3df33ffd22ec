"""File backend reads: the chain (not a re-encode) catches bytes altered on disk, tail reads
start at their seq, and an open right after a read does not decode the run again."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from journald.core import records
from journald.core.errors import StoreCorrupted
from journald.core.records import Record
from journald.storage.file import segments
from journald.storage.file.segments import JOURNAL, MANIFEST, SEGMENTS
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, assistant_payload, text, user_payload

RUN = "run-1"


def small_run(n_turns: int) -> list[Record]:
    b = JournalBuilder(RUN, prompt="p")
    for i in range(n_turns):
        b.turn([f"t{i}"])
    return b.records


def user_run(n: int) -> list[Record]:
    b = JournalBuilder(RUN, prompt="the prompt")
    for i in range(2, n + 1):
        b.add("user", user_payload(f"u{i}"))
    return b.records


async def write_run(data: Path, recs: list[Record], batch: int = 7, **kw: Any) -> FileStore:
    store = FileStore(data, **kw)
    journal = await store.create(recs[0])
    for i in range(1, len(recs), batch):  # several writes: segments seal on the way
        await journal.append(recs[i : i + batch])
    await journal.close()
    return store


def run_path(data: Path, name: str = JOURNAL) -> Path:
    return data / "sessions" / RUN / name


def layout(data: Path) -> list[tuple[Path, int, int]]:
    """(file, line number, seq) of every record of the run, in order."""
    files = []
    if run_path(data, MANIFEST).exists():
        manifest = json.loads(run_path(data, MANIFEST).read_text())
        files = [run_path(data, SEGMENTS) / s["file"] for s in manifest["segments"]]
    files.append(run_path(data))
    return [
        (f, i, json.loads(segments.unframe(line)[0])["seq"])
        for f in files
        for i, line in enumerate(f.read_bytes().splitlines(), 1)
    ]


def alter(path: Path, line_no: int, how: str) -> None:
    """Rewrite one line as different but still valid JSON of the same record, framed with a
    checksum that matches the new bytes (so the chain, not the checksum, must catch it)."""
    lines = path.read_bytes().split(b"\n")
    body = segments.unframe(lines[line_no - 1])[0]
    obj = json.loads(body)
    if how == "keys reordered":
        new = json.dumps(dict(reversed(obj.items())), separators=(",", ":"), ensure_ascii=False)
    else:  # whitespace added
        new = json.dumps(obj, sort_keys=True, ensure_ascii=False)
    assert new.encode() != body
    lines[line_no - 1] = segments.reframe(new.encode())[:-1]
    path.write_bytes(b"\n".join(lines))


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many records the chain walk decoded, by decoder."""
    seen: Counter[str] = Counter()

    def counting(name: str, fn: Any) -> Any:
        def wrapped(raw: bytes) -> Record:
            seen[name] += 1
            return fn(raw)  # type: ignore[no-any-return]

        return wrapped

    monkeypatch.setattr(segments, "decode", counting("decode", records.decode))
    monkeypatch.setattr(segments, "decode_stored", counting("stored", records.decode_stored))
    return seen


@pytest.mark.parametrize("how", ["keys reordered", "whitespace added"])
async def test_a_record_altered_on_disk_into_other_valid_json_is_refused_at_its_seq(
    tmp_path: Path, how: str
) -> None:
    recs = small_run(6)  # 13 records: sealed segments of 5 and 5, an active one of 3
    pristine = tmp_path / "pristine"
    await write_run(pristine, recs, batch=1, segment_max_records=5)
    places = layout(pristine)
    assert len({p[0] for p in places}) == 3
    for path, line_no, seq in places:  # the last record of each file included
        data = tmp_path / "case"
        shutil.copytree(pristine, data)
        alter(data / path.relative_to(pristine), line_no, how)
        store = FileStore(data, segment_max_records=5)
        reads: list[Callable[[str], Awaitable[object]]] = [store.load, store.verify]
        if path.name == JOURNAL:
            reads.append(store.open)  # an open reads the active segment only
        for read in reads:
            with pytest.raises(StoreCorrupted) as err:
                await read(RUN)
            assert err.value.metadata["seq"] == str(seq), (path.name, line_no, read)
            assert err.value.metadata["file"].endswith(path.name)
            assert err.value.metadata["line"] == str(line_no)
        shutil.rmtree(data)


async def test_an_open_right_after_a_read_still_refuses_an_active_segment_altered_between(
    tmp_path: Path,
) -> None:
    store = await write_run(tmp_path, small_run(3))
    assert len(await store.load(RUN)) == 7
    alter(run_path(tmp_path), 3, "whitespace added")
    with pytest.raises(StoreCorrupted) as err:
        await store.open(RUN)
    assert err.value.metadata["seq"] == "3"


async def test_a_tail_read_decodes_the_records_from_its_seq_not_the_whole_segment(
    tmp_path: Path, decodes: Counter[str]
) -> None:
    recs = user_run(250)
    store = await write_run(tmp_path, recs, segment_max_records=100)
    assert [(s.first_seq, s.last_seq) for s in await store.segments(RUN)] == [(1, 106), (107, 211)]
    for from_seq in (2, 150, 211, 212, 230, 250):  # sealed and active, first and last lines
        decodes.clear()
        got = await store.load(RUN, from_seq)
        assert [r.raw for r in got] == [r.raw for r in recs[from_seq - 1 :]]
        assert decodes.total() <= 250 - from_seq + 2, from_seq  # + the check of the line


async def test_a_tail_read_across_a_quarantine_hole_in_a_sealed_segment_returns_the_same_records(
    tmp_path: Path,
) -> None:
    recs = small_run(6)
    store = await write_run(tmp_path, recs, segment_max_records=50)
    lines = run_path(tmp_path).read_bytes().split(b"\n")
    lines[5] = lines[5].replace(b'"seq":6', b'"seq":66')
    run_path(tmp_path).write_bytes(b"\n".join(lines))
    report = await store.recover(RUN, tmp_path / "q")
    assert report.quarantined == 1
    assert report.rebase is not None  # the hole, recorded after the last record
    journal = await FileStore(tmp_path, segment_max_records=5).open(RUN)
    extra = JournalBuilder(RUN)
    extra.records = [*recs, report.rebase]
    more = [extra.add("assistant", assistant_payload([text("go on")], 9))]
    await journal.append(more)  # seals the volume, hole included, as one segment
    await journal.close()
    [seg] = await store.segments(RUN)
    assert (seg.first_seq, seg.last_seq, seg.records) == (1, 15, 14)
    kept = [r for r in recs if r.seq != 6] + [report.rebase] + more
    for from_seq in range(1, 16):
        got = await store.load(RUN, from_seq)
        assert [r.raw for r in got] == [r.raw for r in kept if r.seq >= from_seq], from_seq


async def test_a_tail_read_of_a_pruned_run_returns_the_records_after_the_anchor(
    tmp_path: Path,
) -> None:
    b = JournalBuilder(RUN, prompt="p")
    for i in range(4):
        b.turn([f"t{i}"])
    b.add("rebase", {"messages": [{"role": "user", "content": [text("summary")]}]})
    b.turn(["after"])
    store = await write_run(tmp_path, b.records)
    assert (await store.prune(RUN)).pruned
    full = await store.load(RUN)
    for rec in full:
        got = await store.load(RUN, rec.seq)
        assert [r.raw for r in got] == [r.raw for r in full if r.seq >= rec.seq]


async def test_an_open_right_after_a_full_read_does_not_decode_the_active_segment_again(
    tmp_path: Path, decodes: Counter[str]
) -> None:
    recs = user_run(30)
    await write_run(tmp_path, recs, segment_max_records=20)
    walked, reused = FileStore(tmp_path / "a"), FileStore(tmp_path / "b")
    for store in (walked, reused):
        shutil.copytree(
            tmp_path / "sessions", Path(store.data_dir) / "sessions", dirs_exist_ok=True
        )
    assert len(await reused.load(RUN)) == 30
    decodes.clear()
    j_reused = await reused.open(RUN)
    assert decodes.total() == 0
    j_walked = await walked.open(RUN)
    assert decodes.total() == 8  # the active segment: seqs 23..30
    extra = JournalBuilder(RUN)
    extra.records = list(recs)
    more = [extra.add("user", user_payload(f"v{i}")) for i in range(12)]
    for journal in (j_walked, j_reused):
        assert (journal.last_seq, journal.last_hash) == (30, recs[-1].hash)
        await journal.append(more)  # seals the segment holding 23..42
        await journal.close()
    assert await walked.segments(RUN) == await reused.segments(RUN)
    assert await walked.list() == await reused.list()
    assert [r.raw for r in await reused.load(RUN)] == [r.raw for r in recs + more]


async def test_an_open_after_a_read_sees_what_another_writer_appended_in_between(
    tmp_path: Path,
) -> None:
    recs = user_run(12)
    store = await write_run(tmp_path, recs[:10])
    assert len(await store.load(RUN)) == 10
    other = FileStore(tmp_path)
    journal = await other.open(RUN)
    await journal.append(recs[10:])
    await journal.close()
    with run_path(tmp_path).open("ab") as f:
        f.write(b'{"v":1')  # and a torn tail
    journal = await store.open(RUN)
    assert (journal.last_seq, journal.last_hash) == (12, recs[-1].hash)
    assert journal.repair is not None
    assert journal.repair.dropped_bytes == 6
    await journal.close()


async def test_a_torn_tail_after_a_read_is_still_repaired_and_reported_by_the_open(
    tmp_path: Path, decodes: Counter[str]
) -> None:
    recs = user_run(8)
    store = await write_run(tmp_path, recs)
    await store.load(RUN)
    with run_path(tmp_path).open("ab") as f:
        f.write(b'{"v":1,"seq"')
    decodes.clear()
    journal = await store.open(RUN)
    assert decodes.total() == 0  # the complete lines are the ones just read
    assert journal.repair is not None
    assert (journal.repair.dropped_bytes, journal.repair.last_seq) == (12, 8)
    assert journal.last_seq == 8
    await journal.close()
    assert run_path(tmp_path, "journal.jsonl.broken").read_bytes() == b'{"v":1,"seq"'


async def test_a_resumed_run_of_over_2048_unsealed_records_keeps_its_meta_in_the_listing(
    tmp_path: Path,
) -> None:
    recs = user_run(2100)
    store = await write_run(tmp_path, recs, segmentation=False)
    for warm in (False, True):  # walked by the open, or taken from the read before it
        if warm:
            await store.load(RUN)
        journal = await FileStore(tmp_path, segmentation=False).open(RUN)
        extra = JournalBuilder(RUN)
        extra.records = list(recs)
        await journal.append([extra.add("user", user_payload("more"))])
        await journal.close()
        recs = extra.records
        [info] = await FileStore(tmp_path).list()
        assert (info.prompt_preview, info.model) == ("the prompt", "claude-test")


def test_a_files_lines_are_numbered_from_the_line_they_start_at() -> None:
    lines = segments.file_lines("f", b"b\nc\n", first_line=2)
    assert [(ln.line, ln.raw) for ln in lines] == [(2, b"b"), (3, b"c")]


async def test_a_batch_retried_right_after_an_open_is_acknowledged_as_duplicates_in_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = user_run(30)
    store = await write_run(tmp_path, recs)
    await store.load(RUN)  # the open that follows keeps only the last record in memory
    journal = await store.open(RUN)
    loads: list[int] = []
    real_load = store.load

    async def counting_load(run_id: str, from_seq: int = 1) -> list[Record]:
        loads.append(from_seq)
        return await real_load(run_id, from_seq)

    monkeypatch.setattr(store, "load", counting_load)
    acks = await journal.append(recs[19:])
    assert [(a.seq, a.hash, a.duplicate) for a in acks] == [
        (r.seq, r.hash, True) for r in recs[19:]
    ]
    assert loads == [20]
    await journal.close()


def read_bytes_so_far() -> int:
    """Bytes this process read through read(2)/pread(2) so far (``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def long_user_run(n: int) -> list[Record]:
    b = JournalBuilder(RUN, prompt="the prompt")
    for i in range(2, n + 1):
        b.add("user", user_payload(f"u{i} " + "x" * 1000))
    return b.records


async def test_a_read_from_near_the_end_of_a_large_active_segment_reads_its_end_not_all_of_it(
    tmp_path: Path,
) -> None:
    recs = long_user_run(3000)  # one active segment of ~3.2 MB
    store = await write_run(tmp_path, recs, batch=500, segment_max_records=10_000)
    assert await store.segments(RUN) == []
    size = run_path(tmp_path).stat().st_size
    for from_seq in (2991, 3000, 2001, 3):
        before = read_bytes_so_far()
        got = await store.load(RUN, from_seq)
        read = read_bytes_so_far() - before
        assert [r.raw for r in got] == [r.raw for r in recs[from_seq - 1 :]]
        if from_seq > 2990:  # ~11 KB of records: the first 64 KiB try, the manifest, the listing
            assert read < 128 * 1024 < size / 25, (from_seq, read, size)


@pytest.mark.parametrize("line_no", [2992, 2995, 3000])
async def test_a_read_from_near_the_end_of_the_active_segment_still_refuses_a_record_after_it(
    tmp_path: Path, line_no: int
) -> None:
    recs = long_user_run(3000)
    store = await write_run(tmp_path, recs, batch=500, segment_max_records=10_000)
    alter(run_path(tmp_path), line_no, "whitespace added")
    with pytest.raises(StoreCorrupted) as err:
        await store.load(RUN, 2991)
    # named at its own line and seq (lines of seq n: line n), as a whole read names it
    assert err.value.metadata["seq"] == str(line_no)
    assert err.value.metadata["line"] == str(line_no)
    assert err.value.metadata["file"].endswith(JOURNAL)


@pytest.mark.parametrize("torn", [b'{"seq":3001,"ki', b"\0" * 700])
async def test_a_read_from_near_the_end_of_the_active_segment_skips_its_torn_tail(
    tmp_path: Path, torn: bytes
) -> None:
    recs = long_user_run(3000)
    store = await write_run(tmp_path, recs, batch=500, segment_max_records=10_000)
    with run_path(tmp_path).open("ab") as f:
        f.write(torn)  # a write cut by a kill, or sectors a power cut left zeroed
    got = await store.load(RUN, 2991)
    assert [r.raw for r in got] == [r.raw for r in recs[2990:]]
