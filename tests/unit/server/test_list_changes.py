"""The marks behind ListChanges notices: each run once per notice, sorted; past ``MAX_IDS``
runs a notice says "List everything"; two listings differ by the runs added, removed or
changed, and only those."""

from __future__ import annotations

import asyncio

from journald.server import list_changes as lc
from journald.storage.base import RunInfo


def info(run_id: str, last_seq: int, status: str = "open") -> RunInfo:
    return RunInfo(
        run_id=run_id,
        created="2026-12-01T00:00:00Z",
        updated=f"2026-12-01T00:00:{last_seq:02d}Z",
        model="m",
        prompt_preview="",
        status=status,
        record_count=last_seq,
        bytes=100 * last_seq,
        last_seq=last_seq,
    )


def test_a_notice_names_each_changed_run_once_sorted_and_then_starts_afresh() -> None:
    async def go() -> None:
        changes = lc.RunChanges()
        f = changes.follow()
        for run_id in ("b", "a", "b", "c"):
            changes.changed(run_id)
        assert f.event.is_set()
        assert f.take() == (["a", "b", "c"], False)
        assert not f.event.is_set()
        assert f.take() == ([], False)
        changes.unfollow(f)
        changes.changed("d")  # nobody follows: nothing is kept
        assert f.take() == ([], False)
        assert len(changes) == 0

    asyncio.run(go())


def test_more_changed_runs_than_one_notice_names_become_list_everything() -> None:
    async def go() -> None:
        changes = lc.RunChanges()
        f = changes.follow()
        for i in range(lc.MAX_IDS + 1):
            changes.changed(f"r{i}")
        changes.changed("late")
        assert f.take() == ([], True)

    asyncio.run(go())


def test_two_listings_differ_by_the_runs_added_removed_or_changed() -> None:
    before = lc.digest([info("same", 3), info("grown", 3), info("gone", 1), info("held", 2)])
    after = lc.digest(
        [info("same", 3), info("grown", 5), info("new", 1), info("held", 2, "completed")]
    )
    assert lc.differences(before, after) == ["gone", "grown", "held", "new"]
    assert lc.differences(after, after) == []
