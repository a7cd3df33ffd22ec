"""The file backend's structural check and scrub walk (docs/design.md#scrubbing).

A run of 9 records in segments of 4 (sealed 1-4 and 5-8, seq 9 active), damaged at a random
place in one of its sealed segments: the scrub walk reports it whatever the damage, and what a
stat can see (a write to the file, a cut, an extension, a deletion) also makes the next open
and a read from the last seq (what an Open that starts from the fold snapshot reads) refuse.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from journald.core.errors import StoreCorrupted
from journald.storage.file.scrub import run_key, scrub_run
from journald.storage.file.segments import MANIFEST, SEGMENTS
from journald.storage.file.store import FileStore
from journald.storage.scrub_budget import ReadBudget
from tests.builders import JournalBuilder, user_payload
from tests.profiles import scaled

RUN = "run-1"
KINDS = ("written", "rotted", "cut", "extended", "deleted")


def nine_records() -> list:  # type: ignore[type-arg]
    b = JournalBuilder(RUN, prompt="the prompt")
    for i in range(2, 10):
        b.add("user", user_payload(f"message {i}"))
    return b.records


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("pristine")

    async def write() -> None:
        store = FileStore(data, segment_max_records=4)
        recs = nine_records()
        journal = await store.create(recs[0])
        for rec in recs[1:]:
            await journal.append([rec])
        await journal.close()
        await store.close()

    asyncio.run(write())
    return data


def run_dir(data: Path) -> Path:
    return data / "sessions" / RUN


def damage(seg: Path, kind: str, at: float, bit: int) -> None:
    st = seg.stat()
    raw = bytearray(seg.read_bytes())
    pos = min(len(raw) - 1, int(at * len(raw)))
    if kind == "deleted":
        seg.unlink()
        return
    if kind in ("written", "rotted"):
        raw[pos] ^= 1 << bit
    elif kind == "cut":
        del raw[pos:]
    else:
        raw += b"x" * (pos + 1)
    seg.write_bytes(bytes(raw))
    if kind == "rotted":  # no write a stat could see
        os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))


def scrubbed(data: Path) -> dict:  # type: ignore[type-arg]
    store = FileStore(data, segment_max_records=4)
    try:
        return scrub_run(store, RUN, ReadBudget(0))
    finally:
        store.io_pool.stop()


@settings(max_examples=scaled(120), deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    segment=st.sampled_from((1, 2)),
    at=st.floats(0, 1, exclude_max=True),
    bit=st.integers(0, 7),
)
@example(kind="cut", segment=2, at=0.5, bit=0)  # found in CI: the walk named the next file
def test_every_damage_of_a_sealed_segment_is_found_and_a_visible_one_refuses_the_open(
    pristine: Path,
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    segment: int,
    at: float,
    bit: int,
) -> None:
    data = Path(
        shutil.copytree(pristine, tmp_path_factory.mktemp("case") / "d", copy_function=shutil.copy2)
    )
    seg = run_dir(data) / SEGMENTS / f"{segment:06d}.jsonl"
    damage(seg, kind, at, bit)
    result = scrubbed(data)
    assert result["ok"] is False, (kind, segment, at, bit, result)
    assert result["metadata"]["run_id"] == RUN
    assert result["metadata"]["file"].endswith(seg.name), result
    if kind == "rotted":
        return  # the scrub's to find: no stat sees it

    async def reads() -> None:
        store = FileStore(data, segment_max_records=4)
        try:
            with pytest.raises(StoreCorrupted) as opened:
                await store.open(RUN)
            assert opened.value.metadata["file"].endswith(seg.name)
            with pytest.raises(StoreCorrupted):
                await store.load(RUN, 9)  # only the active segment: what a snapshot Open reads
            assert (await store.list())[0].status == "corrupted"
        finally:
            await store.close()

    asyncio.run(reads())


def test_a_healthy_run_scrubs_clean_reading_every_byte_once(pristine: Path) -> None:
    result = scrubbed(pristine)
    files = [*sorted((run_dir(pristine) / SEGMENTS).iterdir()), run_dir(pristine) / "journal.jsonl"]
    assert result["ok"] is True, result
    assert result["records"] == 9
    assert result["bytes"] == sum(p.stat().st_size for p in files)


def test_a_manifest_written_before_digests_still_opens_and_its_segments_are_still_scrubbed(
    pristine: Path, tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine, tmp_path / "d", copy_function=shutil.copy2))
    path = run_dir(data) / MANIFEST
    doc = json.loads(path.read_bytes())
    for s in doc["segments"]:
        del s["sha256"], s["mtime_ns"]
    path.write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n")

    async def opens() -> int:
        store = FileStore(data, segment_max_records=4)
        try:
            journal = await store.open(RUN)
            await journal.close()
            return len(await store.load(RUN))
        finally:
            await store.close()

    assert asyncio.run(opens()) == 9
    assert scrubbed(data)["ok"] is True
    damage(run_dir(data) / SEGMENTS / "000001.jsonl", "rotted", 0.5, 3)
    assert scrubbed(data)["ok"] is False


def test_a_sealed_segment_restored_with_its_bytes_but_another_mtime_still_opens(
    pristine: Path, tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine, tmp_path / "d", copy_function=shutil.copyfile))

    async def reads() -> int:
        store = FileStore(data, segment_max_records=4)
        try:
            journal = await store.open(RUN)
            await journal.close()
            return len(await store.load(RUN, 9))
        finally:
            await store.close()

    assert asyncio.run(reads()) == 1
    assert scrubbed(data)["ok"] is True


def test_the_key_of_a_finding_changes_when_a_segment_is_replaced_but_not_on_a_read(
    pristine: Path, tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine, tmp_path / "d", copy_function=shutil.copy2))
    before = run_key(str(run_dir(data)))
    scrubbed(data)
    assert run_key(str(run_dir(data))) == before
    seg = run_dir(data) / SEGMENTS / "000001.jsonl"
    restored = seg.read_bytes()
    seg.unlink()
    seg.write_bytes(restored)  # a restore from a backup: another file
    assert run_key(str(run_dir(data))) != before


def test_a_read_budget_paces_reads_to_its_rate() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    budget = ReadBudget(1 << 20, clock=lambda: now[0], sleep=sleep)
    for _ in range(64):
        budget.spend(64 * 1024)  # 4 MiB at 1 MiB/s
    assert 3.9 < now[0] <= 4.0
    assert budget.bytes_read == 4 << 20
    free = ReadBudget(0, clock=lambda: now[0], sleep=sleep)
    free.spend(1 << 30)
    assert free.slept_s == 0


def test_each_seal_records_the_digest_of_the_segment_file_also_after_a_reopen(
    pristine: Path, tmp_path: Path
) -> None:
    """Segments 1 and 2 were sealed by the journal that created the run (digest fed by its
    writes); segment 3 by one that opened it with seq 9 already in its active segment."""
    data = Path(shutil.copytree(pristine, tmp_path / "d", copy_function=shutil.copy2))
    b = JournalBuilder(RUN, prompt="the prompt")
    for i in range(2, 13):
        b.add("user", user_payload(f"message {i}"))

    async def more() -> None:
        store = FileStore(data, segment_max_records=4)
        try:
            journal = await store.open(RUN)
            for rec in b.records[9:12]:
                await journal.append([rec])
            await journal.close()
        finally:
            await store.close()

    asyncio.run(more())
    doc = json.loads((run_dir(data) / MANIFEST).read_bytes())
    assert [s["file"] for s in doc["segments"]] == [f"00000{i}.jsonl" for i in (1, 2, 3)]
    for s in doc["segments"]:
        seg = run_dir(data) / SEGMENTS / s["file"]
        assert s["sha256"] == hashlib.sha256(seg.read_bytes()).hexdigest(), s["file"]
        assert s["mtime_ns"] == seg.stat().st_mtime_ns
    assert scrubbed(data)["ok"] is True
