"""Prune keeps what it drops in a ``pre_prune`` checkpoint (the file store's ``before`` hook)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from journald.clock import utc_ts
from journald.core.fold import fold
from journald.core.governance import sanitize
from journald.storage.checkpoint_base import pre_prune_hook
from journald.storage.file.checkpoint_store import FileCheckpointStore
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, text


def test_a_prune_first_checkpoints_the_conversation_it_drops(tmp_path: Path) -> None:
    b = JournalBuilder("pruned")
    b.turn(["a"])
    b.turn(["b"])
    before_rebase = sanitize(fold(b.records).messages)[0]
    b.add(
        "rebase", {"reason": "compaction", "messages": [{"role": "user", "content": [text("s")]}]}
    )
    b.turn(["c"])

    async def scenario() -> None:
        store = FileStore(tmp_path / "data")
        journal = await store.create(b.records[0])
        await journal.append(b.records[1:])
        await journal.close()
        cps = FileCheckpointStore.colocated_with(store.sessions_dir)
        report = await store.prune("pruned", before=pre_prune_hook(cps, utc_ts))
        assert report.pruned
        [meta] = await cps.list("pruned")
        assert meta.trigger == "pre_prune"
        assert meta.seq == report.rebase_seq - 1
        cp = await cps.get("pruned", meta.checkpoint_id)
        assert cp.messages == before_rebase
        kept = await store.load("pruned")
        assert kept[0].seq == 1
        assert len(kept) < len(b.records)
        assert fold(kept).messages == fold(b.records).messages
        await store.close()

    asyncio.run(scenario())
