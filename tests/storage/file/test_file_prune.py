"""File backend: explicit prune, its manifest anchor, and interrupted prunes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from journald import failpoints
from journald.core.errors import BackendUnavailable, Locked, SeqConflict, StoreCorrupted
from journald.core.fold import fold
from journald.core.records import Record
from journald.storage.file.segments import JOURNAL, MANIFEST, SEGMENTS, STAGED, frame
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, assistant_payload, text, user_payload

RUN = "run-1"


def with_rebases() -> list[Record]:
    b = JournalBuilder(RUN, prompt="start")
    for round_ in range(2):
        for i in range(3):
            b.turn([f"r{round_}t{i}"])
        b.add(
            "rebase",
            {
                "reason": "compaction",
                "messages": [{"role": "user", "content": [text(f"summary {round_}")]}],
            },
        )
    b.add("user", user_payload("next"))
    b.add("assistant", assistant_payload([text("ok")], 9))
    return b.records


async def write(data: Path, records: list[Record]) -> FileStore:
    store = FileStore(data, segment_max_records=4)
    journal = await store.create(records[0])
    for rec in records[1:]:
        await journal.append([rec])
    await journal.close()
    return store


def manifest(data: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((data / "sessions" / RUN / MANIFEST).read_text())
    return loaded


def run_files(data: Path) -> list[str]:
    return sorted(p.name for p in (data / "sessions" / RUN).rglob("*.jsonl*"))


@pytest.fixture(autouse=True)
def _no_failpoints() -> object:
    yield None
    failpoints.disarm()


async def test_prune_keeps_meta_and_everything_from_the_latest_rebase(tmp_path: Path) -> None:
    records = with_rebases()
    store = await write(tmp_path, records)
    rebase = [r for r in records if r.kind == "rebase"][-1]
    report = await store.prune(RUN)
    assert report.pruned
    assert (report.rebase_seq, report.dropped_from, report.dropped_to) == (
        rebase.seq,
        2,
        rebase.seq - 1,
    )
    kept = [records[0]] + [r for r in records if r.seq >= rebase.seq]
    loaded = await store.load(RUN)
    assert [r.raw for r in loaded] == [r.raw for r in kept]
    assert report.kept_records == len(kept)
    assert fold(loaded).messages == fold(records).messages
    [anchor] = manifest(tmp_path)["anchors"]
    assert anchor == {
        "after_seq": 1,
        "after_hash": records[0].hash,
        "resume_seq": rebase.seq,
        "resume_prev": rebase.prev,
        "reason": "prune",
        "dropped_from": 2,
        "dropped_to": rebase.seq - 1,
    }
    assert not list((tmp_path / "sessions" / RUN / SEGMENTS).iterdir())
    report_v = await store.verify(RUN)
    assert (report_v.records, report_v.last_seq) == (len(kept), records[-1].seq)


async def test_seqs_keep_growing_after_a_prune_and_are_never_reused(tmp_path: Path) -> None:
    records = with_rebases()
    store = await write(tmp_path, records)
    await store.prune(RUN)
    journal = await store.open(RUN)
    assert journal.last_seq == records[-1].seq
    with pytest.raises(SeqConflict, match="pruned"):
        await journal.append([records[3]])
    b = JournalBuilder(RUN)
    b.records = list(records)
    extra = [b.add("user", user_payload(f"more {i}")) for i in range(6)]
    for rec in extra:
        await journal.append([rec])
    await journal.close()
    loaded = await store.load(RUN)
    assert [r.seq for r in loaded][-6:] == [r.seq for r in extra]
    assert (await store.verify(RUN)).last_seq == extra[-1].seq
    assert len(manifest(tmp_path)["segments"]) >= 1


async def test_prune_without_a_rebase_to_cut_to_changes_nothing(tmp_path: Path) -> None:
    b = JournalBuilder(RUN)
    b.turn(["a"])
    store = await write(tmp_path, b.records)
    before = await store.load(RUN)
    assert not (await store.prune(RUN)).pruned
    assert await store.load(RUN) == before


async def test_prune_is_refused_while_the_run_is_open(tmp_path: Path) -> None:
    store = await write(tmp_path, with_rebases())
    journal = await store.open(RUN)
    with pytest.raises(Locked):
        await store.prune(RUN)
    await journal.close()


async def test_the_pre_prune_hook_sees_the_whole_run_and_its_failure_aborts(
    tmp_path: Path,
) -> None:
    records = with_rebases()
    store = await write(tmp_path, records)
    seen: list[int] = []

    async def refuse(run_id: str, recs: Sequence[Record]) -> None:
        seen.append(len(recs))
        raise RuntimeError("checkpoint failed")

    with pytest.raises(RuntimeError):
        await store.prune(RUN, before=refuse)
    assert seen == [len(records)]
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in records]


async def test_a_broken_chain_across_the_prune_gap_is_still_corruption(tmp_path: Path) -> None:
    records = with_rebases()
    store = await write(tmp_path, records)
    await store.prune(RUN)
    path = tmp_path / "sessions" / RUN / MANIFEST
    obj = json.loads(path.read_text())
    obj["anchors"][0]["resume_prev"] = "0" * 64
    path.write_text(json.dumps(obj))
    with pytest.raises(StoreCorrupted):
        await store.verify(RUN)


@pytest.mark.parametrize(
    ("point", "committed"),
    [("mid_prune_stage", False), ("mid_prune_rename", True), ("after_prune_rename", True)],
)
async def test_an_interrupted_prune_is_never_seen_half_done_and_settles_on_next_open(
    tmp_path: Path, point: str, committed: bool
) -> None:
    records = with_rebases()
    store = await write(tmp_path, records)
    rebase = [r for r in records if r.kind == "rebase"][-1]
    pruned = [records[0]] + [r for r in records if r.seq >= rebase.seq]
    failpoints.arm(f"{point}=raise:EIO@1")
    with pytest.raises(BackendUnavailable, match=f"failpoint {point}"):
        await store.prune(RUN)
    failpoints.disarm()
    want = pruned if committed else records
    # readers see either the whole old volume or the whole new one, never a mix
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in want]
    assert (await store.verify(RUN)).records == len(want)
    journal = await store.open(RUN)  # settles: completes or rolls back
    await journal.close()
    assert STAGED not in run_files(tmp_path)
    assert "pending" not in manifest(tmp_path)
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in want]
    if committed:
        assert not list((tmp_path / "sessions" / RUN / SEGMENTS).iterdir())
        assert (tmp_path / "sessions" / RUN / JOURNAL).read_bytes() == b"".join(
            frame(r) for r in pruned
        )


async def test_a_prune_never_drops_a_live_framework_state_value(tmp_path: Path) -> None:
    b = JournalBuilder(RUN, prompt="start")
    b.add("state", {"namespace": "items", "key": "0001", "type": "json", "data": "e30="})
    b.add("state", {"namespace": "items", "key": "0002", "type": "json", "data": "e30="})
    b.turn(["t1"])
    b.add("rebase", {"reason": "edit", "messages": []})
    b.add("user", user_payload("next"))
    store = await write(tmp_path, b.records)
    assert not (await store.prune(RUN)).pruned  # both values were written before the rebase
    assert [r.raw for r in await store.load(RUN)] == [r.raw for r in b.records]
    journal = await store.open(RUN)
    more = JournalBuilder(RUN, prompt="start")
    more.records = list(b.records)
    more.add("rebase", {"reason": "edit", "messages": []})
    for key in ("0001", "0002"):  # rewritten after the latest rebase: the old values are dead
        more.add("state", {"namespace": "items", "key": key, "type": "json", "data": "e30="})
    await journal.append(more.records[len(b.records) :])
    await journal.close()
    report = await store.prune(RUN)
    assert report.pruned
    assert fold(await store.load(RUN)).state == fold(more.records).state
    await store.close()
