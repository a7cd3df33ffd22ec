"""File backend specifics: layout and modes, data dir default, locks, group commit, failed
writes, segments and the manifest, the listing cache."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from journald import failpoints
from journald.core.errors import BackendUnavailable, InvalidId, Locked, StorageFull, StoreCorrupted
from journald.core.records import Record
from journald.paths import default_data_dir
from journald.storage.file.segments import (
    JOURNAL,
    MANIFEST,
    META_CACHE,
    SEGMENTS,
    frame,
    read_manifest,
)
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, user_payload

ROOT = Path(__file__).resolve().parents[3]
RUN = "run-1"


def records_of(n_turns: int, run_id: str = RUN) -> list[Record]:
    b = JournalBuilder(run_id)
    for i in range(n_turns):
        b.turn([f"t{i}"])
    return b.records


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def read(p: Path) -> bytes:
    return p.read_bytes()


def spawn(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def tree(p: Path) -> list[Path]:
    return sorted(p.rglob("*"))


@pytest.fixture(autouse=True)
def _no_failpoints() -> object:
    yield None
    failpoints.disarm()


def test_default_data_dir_follows_xdg_state_home_and_never_the_cwd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_data_dir() == tmp_path / "state" / "journald"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert default_data_dir() == Path.home() / ".local" / "state" / "journald"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".local" / "state" / "journald"
    assert not str(default_data_dir()).startswith(os.getcwd() + "/journald")


async def test_a_store_without_a_data_dir_uses_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    store = FileStore()
    assert store.data_dir == str(tmp_path / "state" / "journald")
    journal = await store.create(records_of(0)[0])
    await store.close()
    assert journal.last_seq == 1
    assert (tmp_path / "state" / "journald" / "sessions" / RUN / JOURNAL).exists()


async def test_lays_out_a_run_with_private_modes(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "data", segment_max_records=3)
    records = records_of(3)
    journal = await store.create(records[0])
    for rec in records[1:]:
        await journal.append([rec])
    await journal.close()
    run = tmp_path / "data" / "sessions" / RUN
    for d in (tmp_path / "data", tmp_path / "data" / "sessions", run, run / SEGMENTS):
        assert mode(d) == 0o700, d
    files = [p for p in tree(run) if p.is_file()]
    assert {p.name for p in files} >= {JOURNAL, MANIFEST, META_CACHE, "000001.jsonl"}
    for f in files:
        assert mode(f) == 0o600, f
    manifest = json.loads(read(run / MANIFEST))
    first = manifest["segments"][0]
    assert first["file"] == "000001.jsonl"
    assert (first["first_seq"], first["last_seq"], first["records"]) == (1, 3, 3)
    assert first["bytes"] == len(read(run / SEGMENTS / "000001.jsonl"))
    assert first["first_hash"] == records[0].hash
    assert first["last_hash"] == records[2].hash
    assert first["messages"] == 3  # the prompt, the assistant turn, the tool result


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "a" * 129, "-x", ".hidden", "a b"])
async def test_an_unsafe_id_never_becomes_a_path(tmp_path: Path, bad: str) -> None:
    store = FileStore(tmp_path / "data")
    before = tree(tmp_path)
    for call in (store.open, store.exists, store.load, store.delete, store.verify):
        with pytest.raises(InvalidId):
            await call(bad)
    with pytest.raises(InvalidId):
        await store.recover(bad, tmp_path / "q")
    with pytest.raises(InvalidId):
        await store.prune(bad)
    assert tree(tmp_path) == before


async def test_listing_skips_directories_whose_names_are_not_run_ids(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await store.create(records_of(0)[0])
    (tmp_path / "sessions" / "not an id").mkdir()
    (tmp_path / "sessions" / ".deleted-x").mkdir()
    assert [i.run_id for i in await store.list()] == [RUN]
    await store.close()


async def test_a_run_is_locked_against_another_process_until_it_dies(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    journal = await store.create(records_of(0)[0])
    await journal.close()
    code = (
        "import asyncio,sys\n"
        "from journald.storage.file.store import FileStore\n"
        "async def main():\n"
        f"    j = await FileStore({str(tmp_path)!r}).open({RUN!r})\n"
        "    print('ready', flush=True)\n"
        "    sys.stdin.readline()\n"
        "asyncio.run(main())\n"
    )
    proc = spawn(code)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(Locked) as err:
            await store.open(RUN)
        assert f"pid={proc.pid}" in err.value.metadata["holder"]
        with pytest.raises(Locked):
            await store.delete(RUN)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for s in (proc.stdin, proc.stdout):
            if s is not None:
                s.close()
    journal = await store.open(RUN)  # the kernel released the dead holder's flock
    assert journal.last_seq == 1
    await journal.close()


async def test_two_stores_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    a, b = FileStore(tmp_path), FileStore(tmp_path)
    journal = await a.create(records_of(0)[0])
    with pytest.raises(Locked):
        await b.open(RUN)
    await journal.close()
    journal = await b.open(RUN)
    await journal.close()


async def test_appends_queued_together_go_out_as_one_write(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    records = records_of(8)
    journal = await store.create(records[0])
    assert journal.commits == 1
    results = await asyncio.gather(*(journal.append([r]) for r in records[1:]))
    assert [r[0].seq for r in results] == list(range(2, len(records) + 1))
    assert journal.commits == 2  # create, then one write + fdatasync for all 7 appends
    await journal.close()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]


async def test_out_of_order_appends_queue_behind_a_write_in_flight(tmp_path: Path) -> None:
    store = FileStore(tmp_path, gap_wait_s=5.0)
    records = records_of(8)
    journal = await store.create(records[0])
    # later seqs arrive first; hold the first write in flight so the rest queue behind it
    failpoints.arm("before_write=sleep:300@1")
    results = await asyncio.gather(*(journal.append([r]) for r in reversed(records[1:])))
    assert sorted(r[0].seq for r in results) == list(range(2, len(records) + 1))
    assert journal.commits == 3  # create, seq 2 alone, then seqs 3.. together
    await journal.close()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]


@pytest.mark.parametrize("point", ["before_write", "after_write_before_fsync"])
async def test_a_disk_full_write_leaves_the_journal_byte_identical_and_appendable(
    tmp_path: Path, point: str
) -> None:
    store = FileStore(tmp_path)
    records = records_of(3)
    journal = await store.create(records[0])
    await journal.append(records[1:3])
    path = tmp_path / "sessions" / RUN / JOURNAL
    before = read(path)
    failpoints.arm(f"{point}=raise:ENOSPC@1")
    with pytest.raises(StorageFull) as err:
        await journal.append(records[3:5])
    assert err.value.metadata["seq"] == "4"
    assert read(path) == before
    assert journal.last_seq == 3
    assert len(await store.load(RUN)) == 3
    await journal.append(records[3:])
    assert journal.last_seq == len(records)
    await journal.close()


async def test_an_io_error_fails_every_queued_append_and_keeps_the_journal(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    records = records_of(3)
    journal = await store.create(records[0])
    failpoints.arm("after_write_before_fsync=raise:EIO@1")
    outcomes = await asyncio.gather(
        *(journal.append([r]) for r in records[1:4]), return_exceptions=True
    )
    assert all(isinstance(o, BackendUnavailable) for o in outcomes)
    assert journal.last_seq == 1
    results = await asyncio.gather(*(journal.append([r]) for r in records[1:]))
    assert [r[0].seq for r in results] == list(range(2, len(records) + 1))
    await journal.close()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]


async def test_seals_by_bytes_and_never_when_segmentation_is_off(tmp_path: Path) -> None:
    records = records_of(6)
    by_bytes = FileStore(tmp_path / "a", segment_max_bytes=600)
    off = FileStore(tmp_path / "b", segmentation=False, segment_max_records=1)
    for store in (by_bytes, off):
        journal = await store.create(records[0])
        for rec in records[1:]:
            await journal.append([rec])
        await journal.close()
        assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]
    assert (await by_bytes.verify(RUN)).segments > 2
    assert (await off.verify(RUN)).segments == 1
    unsealed = read_manifest(str(tmp_path / "b" / "sessions" / RUN), RUN)
    assert unsealed is not None
    assert unsealed.segments == []


async def test_a_run_without_a_manifest_reads_as_a_single_volume(tmp_path: Path) -> None:
    """Written as older versions did: unframed lines (no checksum) and no manifest."""
    records = records_of(4)
    run = tmp_path / "sessions" / RUN
    run.mkdir(parents=True)
    (run / JOURNAL).write_bytes(b"".join(r.raw + b"\n" for r in records))
    store = FileStore(tmp_path, segment_max_records=3)
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]
    journal = await store.open(RUN)
    more = records_of(5)
    await journal.append(more[len(records) :])
    await journal.close()
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in more]
    assert (await store.verify(RUN)).last_seq == len(more)


async def test_the_listing_cache_is_used_when_fresh_and_ignored_when_stale(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    records = records_of(2)
    journal = await store.create(records[0])
    await journal.append(records[1:3])
    await journal.close()
    cache = tmp_path / "sessions" / RUN / META_CACHE
    obj = json.loads(read(cache))
    assert obj["info"]["record_count"] == 3
    obj["info"]["model"] = "from-the-cache"
    cache.write_text(json.dumps(obj))
    [row] = await store.list()
    assert row.model == "from-the-cache"  # fresh: the cache answered
    journal = await store.open(RUN)
    await journal.append(records[3:])  # the journal grew: the cache no longer describes it
    [row] = await store.list()
    assert (row.model, row.record_count) == ("claude-test", len(records))
    await journal.close()


async def test_a_failed_create_leaves_no_run_behind(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    failpoints.arm("before_write=raise:ENOSPC@1")
    with pytest.raises(StorageFull):
        await store.create(records_of(0)[0])
    failpoints.disarm()
    assert not await store.exists(RUN)
    journal = await store.create(records_of(0)[0])
    assert journal.last_seq == 1
    await journal.close()


async def test_fifty_open_runs_write_their_records_in_order_on_two_writer_threads(
    tmp_path: Path,
) -> None:
    before = set(threading.enumerate())  # other tests' stores may keep idle writers
    store = FileStore(tmp_path, io_threads=2)
    runs = [records_of(3, f"run-{i}") for i in range(50)]
    journals = [await store.create(records[0]) for records in runs]

    async def one_by_one(journal: Any, records: list[Record]) -> None:
        for r in records[1:]:
            await journal.append([r])

    await asyncio.gather(*(one_by_one(j, r) for j, r in zip(journals, runs, strict=True)))
    started = set(threading.enumerate()) - before
    assert len([t for t in started if t.name.startswith("journald-writer")]) <= 2
    for journal in journals:
        await journal.close()
    await store.close()
    for i, records in enumerate(runs):
        assert read(tmp_path / "sessions" / f"run-{i}" / JOURNAL) == b"".join(map(frame, records))


async def test_readers_racing_seals_and_a_prune_always_see_a_whole_volume(
    tmp_path: Path,
) -> None:
    b = JournalBuilder(RUN)
    for i in range(25):
        b.turn([f"t{i}"])
        if i == 18:
            b.add("rebase", {"reason": "compaction", "messages": []})
    records = b.records
    by_seq = {r.seq: r.raw for r in records}
    rebase_seq = next(r.seq for r in records if r.kind == "rebase")
    store = FileStore(tmp_path, segment_max_records=3)
    journal = await store.create(records[0])
    done = asyncio.Event()
    seen: list[int] = []

    async def reader() -> None:
        for _ in range(2000):
            if done.is_set():
                return
            loaded = await store.load(RUN)
            seqs = [r.seq for r in loaded]
            # a whole volume: the full prefix, or (after the prune) meta + rebase onward
            assert seqs[0] == 1
            assert seqs == list(range(1, len(seqs) + 1)) or seqs[1:] == list(
                range(rebase_seq, rebase_seq + len(seqs) - 1)
            )
            assert all(r.raw == by_seq[r.seq] for r in loaded)
            seen.append(len(seqs))

    async def writer() -> None:
        nonlocal journal
        try:
            for rec in records[1:]:
                await journal.append([rec])
                if rec.seq == rebase_seq + 10:
                    await journal.close()
                    assert (await store.prune(RUN)).pruned
                    journal = await store.open(RUN)
        finally:
            done.set()

    await asyncio.gather(reader(), reader(), writer())
    await journal.close()
    assert len(seen) > 10
    assert (await store.verify(RUN)).last_seq == records[-1].seq


async def test_verify_and_info_while_another_writer_seals_segments_never_report_corruption(
    tmp_path: Path,
) -> None:
    """A seal links the active file into segments/ before the manifest lists it, then
    replaces the active file: a reader must see the manifest and the files of one moment."""
    b = JournalBuilder(RUN)
    for i in range(60):
        b.add("user", user_payload(f"u{i}"))
    records = b.records
    store = FileStore(tmp_path, segment_max_records=2)  # a seal after every other append
    journal = await store.create(records[0])
    done = asyncio.Event()
    checked: list[int] = []

    async def reader(read: Callable[[str], Awaitable[Any]]) -> None:
        for _ in range(5000):  # bounded; ends with the writer
            if done.is_set():
                return
            await read(RUN)
            checked.append(1)

    async def writer() -> None:
        try:
            for rec in records[1:]:
                await journal.append([rec])
        finally:
            done.set()

    await asyncio.gather(reader(store.verify), reader(store.info), reader(store.verify), writer())
    await journal.close()
    assert len(checked) > 20
    assert (await store.verify(RUN)).last_seq == records[-1].seq


async def test_info_of_a_run_whose_first_listed_segment_is_gone_is_store_corrupted(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path, segment_max_records=3)
    b = JournalBuilder("gone-seg")
    for i in range(4):
        b.turn([f"t{i}"])
    journal = await store.create(b.records[0])
    for rec in b.records[1:]:  # one commit each: a seal happens after a commit
        await journal.append([rec])
    await journal.close()
    segs = sorted((tmp_path / "sessions" / "gone-seg" / SEGMENTS).iterdir())
    assert len(segs) >= 2
    segs[0].unlink()
    (tmp_path / "sessions" / "gone-seg" / META_CACHE).unlink(missing_ok=True)
    with pytest.raises(StoreCorrupted) as info:
        await store.info("gone-seg")
    assert segs[0].name in info.value.message
    await store.close()
