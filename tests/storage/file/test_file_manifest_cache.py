"""Dormant reads of a run with many sealed segments parse its manifest once and stat its sealed
segments once per manifest file (docs/design.md#segments-and-manifest, "What a read parses and
stats"), and still see what the guarantee says they see: a manifest rewritten in place with its
size and mtime put back, a sealed segment cut (by the read that opens it, the open for append,
Verify, a restarted store, and every read once one of them met it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from journald.core.errors import StoreCorrupted
from journald.storage.file.manifest_checks import MANIFESTS
from journald.storage.file.segments import SEGMENTS
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, user_payload
from tests.damage import alter_manifest_entry

RUN = "many-sealed"
READS = 12


async def write_many_sealed(data: Path) -> int:
    """A closed run of 60-odd sealed segments of 5 records and a short active one; its last
    seq."""
    b = JournalBuilder(RUN, prompt="the prompt")
    for i in range(2, 308):
        b.add("user", user_payload(f"message {i}"))
    store = FileStore(data, segment_max_records=5)
    try:
        journal = await store.create(b.records[0])
        for i in range(1, len(b.records), 5):
            await journal.append(b.records[i : i + 5])
        await journal.close()
        assert len(await store.segments(RUN)) >= 60
    finally:
        await store.close()
    return b.records[-1].seq


def run_dir(data: Path) -> Path:
    return data / "sessions" / RUN


def cut_last_line(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: raw.rfind(b"\n", 0, len(raw) - 1) + 1])


async def test_repeated_dormant_reads_parse_the_manifest_once_and_stat_the_segments_once(
    tmp_path: Path,
) -> None:
    last = await write_many_sealed(tmp_path)
    store = FileStore(tmp_path, segment_max_records=5)
    try:
        parses, checks = MANIFESTS.parses, store.reads.sealed.checks
        for _ in range(READS):  # what a History tail page and Fold(omit_messages) read
            tail = await store.load(RUN, last)  # the active segment's one record
            assert [r.seq for r in tail] == [last]
            assert (await store.info(RUN)).last_seq == last
            assert len(await store.segments(RUN)) >= 60
        assert MANIFESTS.parses - parses <= 1
        assert store.reads.sealed.checks - checks <= 1
    finally:
        await store.close()


async def test_a_manifest_rewritten_in_place_keeping_its_size_and_mtime_is_parsed_again(
    tmp_path: Path,
) -> None:
    last = await write_many_sealed(tmp_path)
    store = FileStore(tmp_path, segment_max_records=5)
    try:
        assert len(await store.load(RUN, 1)) == last  # parsed and kept
        alter_manifest_entry(run_dir(tmp_path))  # size and mtime kept: only the ctime tells
        with pytest.raises(StoreCorrupted) as refused:
            await store.load(RUN, 1)
        assert refused.value.metadata["file"].endswith("000001.jsonl")
    finally:
        await store.close()


async def test_a_sealed_segment_cut_after_a_dormant_read_is_refused_where_the_guarantee_says(
    tmp_path: Path,
) -> None:
    last = await write_many_sealed(tmp_path)
    store = FileStore(tmp_path, segment_max_records=5)
    try:
        assert len(await store.load(RUN, last)) == 1  # the sealed segments checked, once
        seg = run_dir(tmp_path) / SEGMENTS / "000003.jsonl"
        cut_last_line(seg)
        # a read that does not open it, under the same manifest: the scrubber's to find
        assert len(await store.load(RUN, last)) == 1
        # the read that opens it (naming the seq gap the cut leaves), Verify (naming the
        # segment) and the open for append see it
        with pytest.raises(StoreCorrupted):
            await store.load(RUN, 1)
        with pytest.raises(StoreCorrupted) as verified:
            await store.verify(RUN)
        assert verified.value.metadata["file"].endswith(seg.name)
        with pytest.raises(StoreCorrupted) as opened:
            await store.open(RUN)
        assert opened.value.metadata["file"].endswith(seg.name)
        # once a read met it, every read stats the segments again
        with pytest.raises(StoreCorrupted) as tail:
            await store.load(RUN, last)
        assert tail.value.metadata["file"].endswith(seg.name)
    finally:
        await store.close()
    restarted = FileStore(tmp_path, segment_max_records=5)
    try:
        with pytest.raises(StoreCorrupted) as after_restart:
            await restarted.load(RUN, last)
        assert after_restart.value.metadata["file"].endswith(seg.name)
    finally:
        await restarted.close()
