"""``Store.info`` of a file-backed run reads the ends of its active segment, not all of it,
and reports what the whole walk reports; damage a read met keeps the run listed ``corrupted``
(docs/design.md#file-backend, "What Store.info and List check")."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.errors import StoreCorrupted
from journald.core.records import Record
from journald.storage.file import run_info, stream
from journald.storage.file.segments import JOURNAL, META_CACHE, read_manifest
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, text, user_payload
from tests.profiles import scaled
from tests.storage.file.test_file_reads import (
    RUN,
    alter,
    long_user_run,
    read_bytes_so_far,
    run_path,
    write_run,
)

TORN = {"none": b"", "cut write": b'{"seq":99999,"ki', "zeroed sectors": b"\0" * 700}


async def test_info_of_a_3000_record_active_segment_reads_its_end_and_agrees_with_the_walk(
    tmp_path: Path,
) -> None:
    recs = long_user_run(3000)  # one active segment of ~3.2 MB
    store = await write_run(tmp_path, recs, batch=500, segment_max_records=10_000)
    assert await store.segments(RUN) == []
    size = run_path(tmp_path).stat().st_size
    before = read_bytes_so_far()
    info = await store.info(RUN)
    read = read_bytes_so_far() - before
    # the last 64 KiB, the first line, the manifest and the listing cache
    assert read < 128 * 1024 < size / 25, (read, size)
    assert info == store.reads.info_whole(RUN)
    assert (info.record_count, info.last_seq, info.bytes) == (3000, 3000, size)
    assert info.prompt_preview == "the prompt"


def shaped_run(n_before: int, pruned: bool, n_after: int) -> tuple[list[Record], list[Record]]:
    """A run of ~300-byte records: ``n_before`` of them, then (``pruned``) a rebase a prune
    cuts the run at, then ``n_after`` more appended after the prune."""
    b = JournalBuilder(RUN, prompt="shaped")
    for i in range(n_before):
        b.add("user", user_payload(f"u{i} " + "x" * 300))
    if pruned:
        b.add("rebase", {"messages": [{"role": "user", "content": [text("summary")]}]})
    first = list(b.records)
    for i in range(n_after):
        b.add("user", user_payload(f"v{i} " + "y" * 300))
    return first, b.records[len(first) :]


async def write_shaped(
    data: Path, n_before: int, pruned: bool, n_after: int, seg_records: int, torn: bytes
) -> FileStore:
    first, more = shaped_run(n_before, pruned, n_after)
    store = await write_run(data, first, batch=5, segment_max_records=seg_records)
    if pruned:
        assert (await store.prune(RUN)).pruned
    if more:
        journal = await store.open(RUN)
        for i in range(0, len(more), 5):
            await journal.append(more[i : i + 5])
        await journal.close()
    if torn:
        with run_path(data).open("ab") as f:
            f.write(torn)
    return store


@settings(max_examples=scaled(120), deadline=None)
@given(
    n_before=st.integers(2, 60),
    pruned=st.booleans(),
    n_after=st.integers(0, 60),
    seg_records=st.sampled_from([7, 20, 1000]),
    torn=st.sampled_from(sorted(TORN)),
    piece=st.sampled_from([600, 2048, 65536]),
)
def test_info_from_the_end_of_the_active_segment_equals_the_whole_walk_for_any_shape(
    tmp_path_factory: pytest.TempPathFactory,
    n_before: int,
    pruned: bool,
    n_after: int,
    seg_records: int,
    torn: str,
    piece: int,
) -> None:
    data = tmp_path_factory.mktemp("shape")

    async def case() -> None:
        store = await write_shaped(data, n_before, pruned, n_after, seg_records, TORN[torn])
        try:
            # smaller pieces than 64 KiB: these segments are read from their end, not whole
            with (
                mock.patch.object(stream, "TAIL_READ_BYTES", piece),
                mock.patch.object(run_info, "HEAD_READ_BYTES", 16),
            ):
                cheap = store.reads.info_from_end(RUN)
                got = await store.info(RUN)
                with run_path(data).open("rb") as f:
                    base, _ = stream.read_end(f.fileno(), run_path(data).stat().st_size)
            whole = store.reads.info_whole(RUN)
            assert got == whole
            if cheap is not None:
                assert cheap == whole
            m = read_manifest(str(data / "sessions" / RUN), RUN)
            assert m is not None
            a_seq = m.active_start()[0]
            if base and not any(a.after_seq >= a_seq for a in m.anchors):
                assert cheap is not None  # it is the end, not the whole, that was read
        finally:
            await store.close()

    try:
        asyncio.run(case())
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def test_a_run_whose_damage_a_read_met_is_listed_corrupted_until_its_files_change(
    tmp_path: Path,
) -> None:
    recs = long_user_run(3000)
    store = await write_run(tmp_path, recs, batch=500, segment_max_records=10_000)
    alter(run_path(tmp_path), 1500, "whitespace added")  # the middle: info reads the ends
    (tmp_path / "sessions" / RUN / META_CACHE).unlink()
    with pytest.raises(StoreCorrupted) as met:
        await store.load(RUN)
    assert met.value.metadata["line"] == "1500"
    [row] = await store.list()
    assert row.status == "corrupted"
    assert f"{JOURNAL} line 1500 (seq 1500)" in row.error
    with pytest.raises(StoreCorrupted) as again:
        await store.info(RUN)  # and every dormant read's cache key refuses it too
    assert again.value.metadata["line"] == "1500"
    report = await store.recover(RUN, tmp_path / "q")  # the files change: listed anew
    assert report.quarantined == 1
    [row] = await store.list()
    assert row.status != "corrupted", row
    assert row == store.reads.info_whole(RUN)  # 2999 records and the rebase of the hole


async def test_damage_a_read_met_before_a_recovery_rewrote_the_run_is_not_kept(
    tmp_path: Path,
) -> None:
    recs = long_user_run(300)
    store = await write_run(tmp_path, recs, batch=100, segment_max_records=10_000)
    err = StoreCorrupted("run run-1: made up", metadata={"run_id": RUN})
    store.reads.saw_damage(RUN, (0, 0, 0), err)  # a read that began under another manifest
    assert store.reads.damage_seen(RUN) is None  # the manifest changed since that read began
    assert (await store.list())[0].status != "corrupted"
