"""An open for append of a file-backed run reads the end of its active segment, not all of
it, and starts the writer where the whole read starts it; damage a read met still refuses
the open (docs/design.md#recovery, "What an open for append checks")."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.errors import StoreCorrupted
from journald.storage.base import RepairReport
from journald.storage.file import maintenance, open_end, run_info, stream
from journald.storage.file import store as store_module
from journald.storage.file.journal import OpenState
from journald.storage.file.segments import read_manifest
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, text, user_payload
from tests.profiles import scaled
from tests.storage.file.test_file_info_reads import TORN, write_shaped
from tests.storage.file.test_file_reads import (
    RUN,
    alter,
    long_user_run,
    read_bytes_so_far,
    run_path,
    write_run,
)


def run_dir(data: Path) -> str:
    return str(data / "sessions" / RUN)


def open_whole(store: FileStore, data: Path) -> OpenState:
    """The open state as the whole read of the active segment makes it (before this change)."""
    with mock.patch.object(store_module, "open_from_end", return_value=None):
        return store.open_state(RUN, run_dir(data))


def files_of(data: Path) -> dict[str, bytes]:
    root = Path(run_dir(data))
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def same_state(cheap: OpenState, whole: OpenState, cheap_dir: Path, whole_dir: Path) -> None:
    """Every field the writer uses agrees; the message count is left to the seal and the
    records kept for retries are the last of those the whole read keeps."""
    assert cheap.manifest.encode() == whole.manifest.encode()
    assert (cheap.size, cheap.last_seq, cheap.last_hash) == (
        whole.size,
        whole.last_seq,
        whole.last_hash,
    )
    c, w = cheap.stats, whole.stats
    assert not c.counted
    assert w.counted
    assert (c.records, c.first_seq, c.first_hash, c.first_prev, c.last_seq, c.last_hash) == (
        w.records,
        w.first_seq,
        w.first_hash,
        w.first_prev,
        w.last_seq,
        w.last_hash,
    )
    assert cheap.meta == whole.meta
    assert cheap.recent
    assert cheap.recent == whole.recent[-len(cheap.recent) :]
    if whole.repair is None:
        assert cheap.repair is None
    else:
        assert cheap.repair is not None
        assert relative(cheap.repair, cheap_dir) == relative(whole.repair, whole_dir)


def relative(r: RepairReport, root: Path) -> RepairReport:
    return replace(
        r,
        file=str(Path(r.file).relative_to(root)),
        broken_copy=str(Path(r.broken_copy).relative_to(root)),
    )


async def test_open_of_a_3000_record_active_segment_reads_its_end_and_starts_as_the_whole_read(
    tmp_path: Path,
) -> None:
    recs = long_user_run(3000)  # one active segment of ~3.2 MB
    await write_run(tmp_path / "a", recs, batch=500, segment_max_records=10_000)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    size = run_path(tmp_path / "a").stat().st_size
    store = FileStore(tmp_path / "a", segment_max_records=10_000)  # no read kept a tail
    before = read_bytes_so_far()
    cheap = store.open_state(RUN, run_dir(tmp_path / "a"))
    read = read_bytes_so_far() - before
    # the last 64 KiB, the first line, the manifest and the listing cache
    assert read < 128 * 1024 < size / 25, (read, size)
    whole = open_whole(FileStore(tmp_path / "b"), tmp_path / "b")
    same_state(cheap, whole, tmp_path / "a", tmp_path / "b")
    assert (cheap.last_seq, cheap.size, cheap.stats.records) == (3000, size, 3000)
    assert cheap.meta is not None
    assert cheap.meta.seq == 1


@settings(max_examples=scaled(60), deadline=None)
@given(
    n_before=st.integers(2, 60),
    pruned=st.booleans(),
    n_after=st.integers(0, 60),
    seg_records=st.sampled_from([7, 20, 1000]),
    torn=st.sampled_from(sorted(TORN)),
    piece=st.sampled_from([600, 2048, 65536]),
)
def test_open_from_the_end_of_the_active_segment_equals_the_whole_read_for_any_shape(
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
        store = await write_shaped(data / "a", n_before, pruned, n_after, seg_records, TORN[torn])
        await store.close()
        shutil.copytree(data / "a", data / "b")
        made: list[OpenState | None] = []

        def spy(*args: Any) -> OpenState | None:
            made.append(open_end.open_from_end(*args))
            return made[-1]

        # smaller pieces than 64 KiB: these segments are read from their end, not whole
        with (
            mock.patch.object(stream, "TAIL_READ_BYTES", piece),
            mock.patch.object(run_info, "HEAD_READ_BYTES", 16),
            mock.patch.object(store_module, "open_from_end", spy),
            mock.patch.object(maintenance.log, "warning") as cheap_log,
        ):
            with run_path(data / "a").open("rb") as f:
                base, _ = stream.read_end(f.fileno(), run_path(data / "a").stat().st_size)
            cheap = FileStore(data / "a").open_state(RUN, run_dir(data / "a"))
        with mock.patch.object(maintenance.log, "warning") as whole_log:
            whole = open_whole(FileStore(data / "b"), data / "b")
        said = [str(c).replace(str(data / "a"), "") for c in cheap_log.call_args_list]
        assert said == [str(c).replace(str(data / "b"), "") for c in whole_log.call_args_list]
        if made[0] is not None:
            same_state(cheap, whole, data / "a", data / "b")
        else:
            assert cheap.stats == whole.stats
            assert cheap.size == whole.size
        assert files_of(data / "a") == files_of(data / "b")  # the repair wrote the same
        m = read_manifest(run_dir(data / "a"), RUN)
        assert m is not None
        a_seq = m.active_start()[0]
        if base and not any(a.after_seq >= a_seq for a in m.anchors):
            assert made[0] is not None  # it is the end, not the whole, that was read

    try:
        asyncio.run(case())
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def test_appends_after_an_open_from_the_end_chain_seal_and_pass_a_whole_reopen_and_verify(
    tmp_path: Path,
) -> None:
    recs = long_user_run(3000)
    await write_run(tmp_path, recs, batch=500, segment_max_records=3005)
    store = FileStore(tmp_path, segment_max_records=3005)
    journal = await store.open(RUN)
    assert not journal._stats.counted  # opened from the end
    b = JournalBuilder(RUN, prompt="the prompt")
    b.records = list(recs)
    for i in range(9):
        b.add("user", user_payload(f"after {i}"))
    two = [{"role": "user", "content": [text("summary")]}, {"role": "user", "content": [text("s")]}]
    b.add("rebase", {"reason": "compaction", "messages": two})  # two messages, one record
    more = b.records[3000:]
    await journal.append(more[:3])
    await journal.append([recs[10]])  # a retry of a seq the open did not keep: idempotent
    await journal.append(more[3:])  # seals (>= 3005): the seal counts the segment's messages
    await journal.close()
    [sealed] = await store.segments(RUN)
    assert (sealed.records, sealed.messages) == (3010, 3011)  # the prompt, 3008 users, 2
    whole = open_whole(FileStore(tmp_path), tmp_path)
    assert (whole.last_seq, whole.last_hash) == (3010, more[-1].hash)
    report = await FileStore(tmp_path).verify(RUN)
    assert (report.records, report.last_seq) == (3010, 3010)
    assert [r.hash for r in await FileStore(tmp_path).load(RUN, 1)] == [
        r.hash for r in [*recs, *more]
    ]


async def test_damage_in_the_middle_a_read_met_refuses_the_open_until_the_files_change(
    tmp_path: Path,
) -> None:
    recs = long_user_run(3000)
    await write_run(tmp_path, recs, batch=500, segment_max_records=10_000)
    alter(run_path(tmp_path), 1500, "whitespace added")  # the middle: the open reads the end
    store = FileStore(tmp_path, segment_max_records=10_000)
    with pytest.raises(StoreCorrupted) as met:
        await store.load(RUN)
    with pytest.raises(StoreCorrupted) as refused:
        await store.open(RUN)
    assert refused.value.metadata["line"] == met.value.metadata["line"] == "1500"
    # a store that met nothing opens it (the scrubber and Verify name it), as info lists it
    journal = await FileStore(tmp_path, segment_max_records=10_000).open(RUN)
    assert journal.last_seq == 3000
    await journal.close()
    with pytest.raises(StoreCorrupted):
        await FileStore(tmp_path).verify(RUN)
