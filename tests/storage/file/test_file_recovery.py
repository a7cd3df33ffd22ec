"""File backend: torn tails, interior corruption (strict and quarantine), interrupted seals."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from journald import failpoints
from journald.core.errors import BackendUnavailable, StoreCorrupted
from journald.core.records import Record
from journald.storage.file.segments import JOURNAL, MANIFEST, META_CACHE, SEGMENTS, frame, unframe
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, assistant_payload, text, user_payload

RUN = "run-1"


def small_run(n_turns: int = 3) -> list[Record]:
    b = JournalBuilder(RUN, prompt="p")
    for i in range(n_turns):
        b.turn([f"t{i}"])
    return b.records


async def write_run(data: Path, records: list[Record], **kw: int) -> FileStore:
    store = FileStore(data, **kw)  # type: ignore[arg-type]
    journal = await store.create(records[0])
    for rec in records[1:]:
        await journal.append([rec])
    await journal.close()
    return store


def read(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def same_file(a: Path, b: Path) -> bool:
    return os.path.samefile(a, b)


def run_path(data: Path, name: str = JOURNAL) -> Path:
    return data / "sessions" / RUN / name


@pytest.fixture(autouse=True)
def _no_failpoints() -> object:
    yield None
    failpoints.disarm()


# --- torn tails ------------------------------------------------------------------------


async def test_repairs_a_last_record_cut_at_every_byte_offset_and_appends_after_it(
    tmp_path: Path,
) -> None:
    b = JournalBuilder(RUN, prompt="")
    b.add("user", user_payload("hi"))
    records = list(b.records)
    nxt = b.add("user", user_payload("after the tear"))
    store = await write_run(tmp_path, records[:-1])  # the last one is never acknowledged
    listing = run_path(tmp_path, META_CACHE).read_bytes()
    path = run_path(tmp_path)
    good = b"".join(frame(r) for r in records[:-1])
    last = frame(records[-1])
    assert path.read_bytes() == good
    for cut in range(1, len(last)):
        path.write_bytes(good + last[:cut])
        run_path(tmp_path, META_CACHE).write_bytes(listing)
        for leftover in run_path(tmp_path).parent.glob("journal.jsonl.broken*"):
            leftover.unlink()
        # a read without a lease just does not see the torn line
        assert [r.seq for r in await store.load(RUN)] == [r.seq for r in records[:-1]]
        journal = await store.open(RUN)
        rep = journal.repair
        assert rep is not None
        assert rep.dropped_bytes == cut
        assert rep.last_seq == records[-2].seq
        assert read(rep.broken_copy) == last[:cut]
        assert path.read_bytes() == good
        # the retried record and the next one each land on a line of their own
        await journal.append([records[-1], nxt])
        await journal.close()
        assert path.read_bytes() == good + last + frame(nxt)
        assert [r.raw for r in await store.load(RUN)] == [r.raw for r in [*records, nxt]]
    await store.verify(RUN)


async def test_zero_filled_sectors_after_the_last_record_are_a_torn_tail(tmp_path: Path) -> None:
    """What a power cut leaves: the file grew but the sectors after the acknowledged records
    read back as zeros, possibly followed by a later sector that did reach the disk."""
    b = JournalBuilder(RUN, prompt="p")
    b.turn(["t0"])
    records = list(b.records)
    unacked = frame(b.add("user", user_payload("x" * 1500)))
    store = await write_run(tmp_path, records)
    size = run_path(tmp_path).stat().st_size
    to_sector = -size % 512 or 512
    for tail in (
        b"\0" * to_sector + b"garbage\n",  # zeros from the last record to a sector end
        unacked[:to_sector] + b"\0" * 700,  # a sector of the next record, then zeros to EOF
        unacked[: to_sector + 512] + b"\0" * 512 + unacked[to_sector + 1024 :],
    ):
        with run_path(tmp_path).open("r+b") as f:
            f.truncate(size)
            f.seek(size)
            f.write(tail)
        assert len(await store.load(RUN)) == len(records)
        journal = await store.open(RUN)
        assert journal.repair is not None
        assert journal.repair.dropped_bytes == len(tail)
        assert "torn final record" in journal.repair.sentence()
        await journal.close()


async def test_a_complete_final_line_that_fails_its_checks_is_damage_not_a_tear(
    tmp_path: Path,
) -> None:
    """A crash cuts bytes or zeroes whole sectors; it never writes a complete other line."""
    records = small_run(1)
    store = await write_run(tmp_path, records)
    data = run_path(tmp_path).read_bytes()
    for tail in (b"garbage\n", b"\x00\x00\x00garbage\n", frame(records[-1])[5:]):
        run_path(tmp_path).write_bytes(data + tail)
        for read in (store.load, store.verify, store.open):
            with pytest.raises(StoreCorrupted) as err:
                await read(RUN)
            assert err.value.metadata["seq"] == str(len(records) + 1)
            assert err.value.metadata["line"] == str(len(records) + 1)
        assert run_path(tmp_path).read_bytes() == data + tail
        assert not list(run_path(tmp_path).parent.glob("journal.jsonl.broken*"))


async def test_a_second_repair_keeps_the_first_broken_copy(tmp_path: Path) -> None:
    records = small_run(1)
    store = await write_run(tmp_path, records)
    for tail in (b'{"v":1', b'{"v":1,"seq"'):
        with run_path(tmp_path).open("ab") as f:
            f.write(tail)
        journal = await store.open(RUN)
        await journal.close()
    assert run_path(tmp_path, "journal.jsonl.broken").read_bytes() == b'{"v":1'
    assert run_path(tmp_path, "journal.jsonl.broken.1").read_bytes() == b'{"v":1,"seq"'


async def test_an_active_segment_cut_at_a_line_boundary_is_missing_records_not_a_tear(
    tmp_path: Path,
) -> None:
    """No crash removes whole acknowledged lines: the listing remembers the last seq."""
    records = small_run(2)
    store = await write_run(tmp_path, records)
    data = run_path(tmp_path).read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    run_path(tmp_path).write_bytes(data[:cut])
    for read in (store.load, store.verify, store.open, store.info):
        with pytest.raises(StoreCorrupted, match="acknowledged records are missing") as err:
            await read(RUN)
        assert err.value.metadata["seq"] == str(len(records))
    assert run_path(tmp_path).read_bytes() == data[:cut]


# --- interior corruption -----------------------------------------------------------------


def flip_positions(raw: bytes, count: int = 5) -> list[int]:
    """A handful of offsets spread over the line (first, last, envelope, payload)."""
    n = len(raw)
    return sorted({0, n - 1, n // 4, n // 2, (3 * n) // 4, raw.find(b'"prev"') + 9})[: count + 1]


def layout(data: Path) -> list[tuple[Path, int, int]]:
    """(file, line number, seq) of every record of the run, in order."""
    out: list[tuple[Path, int, int]] = []
    manifest = run_path(data, MANIFEST)
    files = []
    if manifest.exists():
        files = [
            run_path(data, SEGMENTS) / s["file"]
            for s in json.loads(manifest.read_text())["segments"]
        ]
    files.append(run_path(data))
    for f in files:
        for i, line in enumerate(f.read_bytes().splitlines(), 1):
            out.append((f, i, json.loads(unframe(line)[0])["seq"]))
    return out


def flip(path: Path, line_no: int, offset: int) -> None:
    lines = path.read_bytes().split(b"\n")
    line = bytearray(lines[line_no - 1])
    line[offset] ^= 0x01
    lines[line_no - 1] = bytes(line)
    path.write_bytes(b"\n".join(lines))


async def test_a_flipped_byte_in_any_interior_record_is_corruption_at_that_seq(
    tmp_path: Path,
) -> None:
    records = small_run(6)  # 13 records: two sealed segments of 5 and an active one of 3
    pristine = tmp_path / "pristine"
    await write_run(pristine, records, segment_max_records=5)
    places = layout(pristine)
    assert len({p[0] for p in places}) == 3
    for path, line_no, seq in places[:-1]:
        for off in flip_positions(records[seq - 1].raw):
            data = tmp_path / "case"
            shutil.copytree(pristine, data)
            flip(data / path.relative_to(pristine), line_no, off)
            store = FileStore(data, segment_max_records=5)
            for read in (store.load, store.verify):
                with pytest.raises(StoreCorrupted) as err:
                    await read(RUN)
                assert err.value.metadata["seq"] == str(seq), (path.name, line_no, off)
                assert err.value.metadata["run_id"] == RUN
                assert err.value.metadata["file"].endswith(path.name)
                assert err.value.metadata["line"] == str(line_no)
                assert f"seq {seq}" in err.value.message
            shutil.rmtree(data)


async def test_opening_a_run_with_a_damaged_active_segment_refuses_with_corruption(
    tmp_path: Path,
) -> None:
    records = small_run(2)
    store = await write_run(tmp_path, records)
    flip(run_path(tmp_path), 2, 20)
    with pytest.raises(StoreCorrupted) as err:
        await store.open(RUN)
    assert err.value.metadata["seq"] == "2"
    assert not run_path(tmp_path, "journal.jsonl.broken").exists()


async def test_records_out_of_seq_order_are_corruption(tmp_path: Path) -> None:
    records = small_run(2)
    store = await write_run(tmp_path, records)
    lines = run_path(tmp_path).read_bytes().split(b"\n")
    lines[2], lines[3] = lines[3], lines[2]
    run_path(tmp_path).write_bytes(b"\n".join(lines))
    with pytest.raises(StoreCorrupted) as err:
        await store.load(RUN)
    assert err.value.metadata["seq"] == "3"
    assert "seq 4 found where 3 belongs" in err.value.message


async def test_a_missing_or_unlisted_segment_is_corruption(tmp_path: Path) -> None:
    records = small_run(6)
    store = await write_run(tmp_path, records, segment_max_records=5)
    segs = run_path(tmp_path, SEGMENTS)
    extra = segs / "000009.jsonl"
    shutil.copy(segs / "000001.jsonl", extra)
    with pytest.raises(StoreCorrupted, match="not listed in the manifest"):
        await store.verify(RUN)
    with pytest.raises(StoreCorrupted, match="not listed in the manifest"):
        await store.open(RUN)
    extra.unlink()
    (segs / "000001.jsonl").unlink()
    with pytest.raises(StoreCorrupted, match="missing") as err:
        await store.load(RUN)
    assert err.value.metadata["seq"] == "1"


async def test_a_sealed_segment_cut_short_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    records = small_run(6)
    store = await write_run(tmp_path, records, segment_max_records=5)
    seg = run_path(tmp_path, SEGMENTS) / "000002.jsonl"
    seg.write_bytes(seg.read_bytes()[:-10])
    with pytest.raises(StoreCorrupted, match="partial line"):
        await store.load(RUN)


# --- recovery mode -----------------------------------------------------------------------


async def test_recovery_quarantines_each_damaged_interior_record_outside_the_run(
    tmp_path: Path,
) -> None:
    records = small_run(6)
    pristine = tmp_path / "pristine"
    await write_run(pristine, records, segment_max_records=5)
    places = layout(pristine)
    for path, line_no, seq in places[1:]:  # every record but the meta, the last one included
        data = tmp_path / "case"
        shutil.copytree(pristine, data)
        flip(data / path.relative_to(pristine), line_no, len(records[seq - 1].raw) // 2)
        store = FileStore(data, segment_max_records=5)
        qdir = tmp_path / "quarantine"
        report = await store.recover(RUN, qdir)
        assert report.quarantined == 1
        [pos] = report.positions
        assert pos["seq"] == seq
        assert pos["reason"] == (
            "the line's checksum does not match its record bytes (they changed on disk)"
        )
        evidence = Path(report.directory) / str(pos["evidence"])
        assert evidence.parent.parent == qdir
        assert pos["sha256"] == __import__("hashlib").sha256(evidence.read_bytes()).hexdigest()
        assert "result of" not in json.dumps(report.positions)  # no message text
        # the hole is recorded in the run, after its last seq (none is ever reused)
        rebase = report.rebase
        assert rebase is not None
        assert (rebase.seq, rebase.kind, report.hole_from, report.hole_to) == (
            records[-1].seq + 1,
            "rebase",
            seq,
            seq,
        )
        assert rebase.payload["reason"] == "quarantine"
        assert rebase.payload["covered"] == {"from_seq": seq, "to_seq": seq}
        loaded = await store.load(RUN)
        assert [r.raw for r in loaded] == [r.raw for r in records if r.seq != seq] + [rebase.raw]
        assert (await store.verify(RUN)).last_seq == rebase.seq
        journal = await store.open(RUN)
        extra = JournalBuilder(RUN)
        extra.records = [*records, rebase]
        await journal.append([extra.add("assistant", assistant_payload([text("go on")], 9))])
        await journal.close()
        assert (await store.verify(RUN)).last_seq == rebase.seq + 1
        shutil.rmtree(data)
        shutil.rmtree(qdir)


async def test_recovery_of_a_healthy_run_moves_nothing(tmp_path: Path) -> None:
    records = small_run(2)
    store = await write_run(tmp_path / "d", records)
    report = await store.recover(RUN, tmp_path / "q")
    assert (report.quarantined, report.positions) == (0, [])
    assert not (tmp_path / "q").exists()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]


async def test_recovery_refuses_a_quarantine_directory_inside_the_run(tmp_path: Path) -> None:
    store = await write_run(tmp_path, small_run(1))
    with pytest.raises(ValueError, match="outside the run"):
        await store.recover(RUN, run_path(tmp_path, "q"))


# --- interrupted seals -------------------------------------------------------------------


async def test_a_seal_that_fails_before_its_manifest_rolls_back_and_retries(
    tmp_path: Path,
) -> None:
    records = small_run(6)
    store = FileStore(tmp_path, segment_max_records=5)
    journal = await store.create(records[0])
    await journal.append(records[1:4])
    failpoints.arm("mid_manifest_write=raise:ENOSPC@1")
    [res] = await journal.append([records[4]])  # durable; its seal fails and rolls back
    assert res.seq == 5
    assert not (run_path(tmp_path, SEGMENTS) / "000001.jsonl").exists()
    for rec in records[5:]:
        await journal.append([rec])
    await journal.close()
    manifest = json.loads(run_path(tmp_path, MANIFEST).read_text())
    assert [(s["first_seq"], s["last_seq"]) for s in manifest["segments"]] == [(1, 6), (7, 11)]
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]
    assert (await store.verify(RUN)).segments == 3


async def test_a_seal_stopped_after_its_manifest_reads_correctly_and_open_completes_it(
    tmp_path: Path,
) -> None:
    records = small_run(6)
    store = FileStore(tmp_path, segment_max_records=5)
    journal = await store.create(records[0])
    await journal.append(records[1:4])
    failpoints.arm("after_seal_manifest=raise:EIO@1")
    await journal.append([records[4]])
    failpoints.disarm()
    seg = run_path(tmp_path, SEGMENTS) / "000001.jsonl"
    assert same_file(seg, run_path(tmp_path))
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records[:5]]
    with pytest.raises(BackendUnavailable, match="open the run again"):
        await journal.append([records[5]])
    await journal.close()
    journal = await store.open(RUN)
    assert not same_file(seg, run_path(tmp_path))
    await journal.append(records[5:])
    await journal.close()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]


# --- what the daemon's log shows ----------------------------------------------------------


async def test_a_repair_and_each_damage_are_logged_with_run_file_and_seq(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="journald")
    records = small_run(2)
    store = await write_run(tmp_path, records)
    with run_path(tmp_path).open("ab") as f:
        f.write(b'{"v":1,"seq":')
    journal = await store.open(RUN)
    await journal.close()
    [repair] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert repair.name == "journald.storage.file"
    text = repair.getMessage()
    assert f"run {RUN}: repaired a torn write: cut 13 bytes after line {len(records)}" in text
    assert str(run_path(tmp_path)) in text
    assert "journal.jsonl.broken" in text
    caplog.clear()
    flip(run_path(tmp_path), 3, 20)
    for read in (store.load, store.verify, store.open, store.load):
        with pytest.raises(StoreCorrupted):
            await read(RUN)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, "each damage is logged at ERROR once, repeats at DEBUG"
    msg = errors[0].getMessage()
    assert msg.startswith(f"store_corrupted: run {RUN}, file {run_path(tmp_path)}, line 3, seq 3")
    assert f"journald recover {RUN}" in msg
    assert [r.levelno for r in caplog.records].count(logging.DEBUG) == 3
