"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance) against
a real daemon: every base and extended capability, for the async saver, for the sync saver
through its own async methods, and for the sync methods alone behind a thread adapter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import journald_client as jc
import pytest
from journald_client.langgraph import AsyncJournaldSaver, JournaldSaver
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from langgraph.checkpoint.conformance.report import CapabilityReport

from tests.daemon import Daemon


class SyncMethodsOnThreads(BaseCheckpointSaver[str]):
    """Calls only the sync methods of ``inner``, each on a worker thread."""

    def __init__(self, inner: JournaldSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return self.inner.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        got = await asyncio.to_thread(
            lambda: list(self.inner.list(config, filter=filter, before=before, limit=limit))
        )
        for tup in got:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.inner.prune, thread_ids, strategy=strategy)


def _assert_full(report: CapabilityReport) -> None:
    failures = {k: r.failures for k, r in report.results.items() if r.failures}
    assert report.conformance_level() == "FULL", failures
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[cap.value]
        assert result.detected, f"{cap.value} not implemented"
        assert result.passed is True, (cap.value, result.failures)
        assert result.tests_passed > 0


@pytest.mark.parametrize("flavour", ["async", "sync-own-async", "sync-methods"])
def test_langgraph_conformance_is_full_with_every_base_and_extended_capability(
    daemon: Daemon, flavour: str
) -> None:
    socket = str(daemon.socket)

    async def factory() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        if flavour == "async":
            saver = await AsyncJournaldSaver.connect(socket, name="conformance")
            try:
                yield saver
            finally:
                await saver.aclose()
            return
        sync = await asyncio.to_thread(JournaldSaver, socket=socket, name="conformance")
        try:
            yield sync if flavour == "sync-own-async" else SyncMethodsOnThreads(sync)
        finally:
            await asyncio.to_thread(sync.close)

    registered = checkpointer_test(name=f"journald-{flavour}")(factory)
    report = asyncio.run(validate(registered))
    _assert_full(report)
    with jc.connect(socket) as client:
        assert {r.model for r in client.list()} <= {"langgraph"}
