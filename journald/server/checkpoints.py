"""Checkpoint, compaction, restore, fork, export/import and history RPCs (SPEC §9).

Not implemented in this build: each answers UNIMPLEMENTED with a sentence saying so, so a
client gets a clear status instead of a hang. (Tracked by the checkpoints issue.)
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc
from journald_client.pb import journal_pb2 as pb

Ctx = grpc.aio.ServicerContext[Any, Any]


async def _unimplemented(context: Ctx, rpc: str) -> NoReturn:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED, f"{rpc} is not available in this journald build yet"
    )
    raise AssertionError("unreachable")


class CheckpointRpcs:
    async def History(self, request: pb.HistoryRequest, context: Ctx) -> pb.HistoryResponse:
        await _unimplemented(context, "History")

    async def Checkpoint(
        self, request: pb.CheckpointRequest, context: Ctx
    ) -> pb.CheckpointResponse:
        await _unimplemented(context, "Checkpoint")

    async def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: Ctx
    ) -> pb.ListCheckpointsResponse:
        await _unimplemented(context, "ListCheckpoints")

    async def Restore(self, request: pb.RestoreRequest, context: Ctx) -> pb.RestoreResponse:
        await _unimplemented(context, "Restore")

    async def DeleteCheckpoint(
        self, request: pb.DeleteCheckpointRequest, context: Ctx
    ) -> pb.DeleteCheckpointResponse:
        await _unimplemented(context, "DeleteCheckpoint")

    async def Compact(self, request: pb.CompactRequest, context: Ctx) -> pb.CompactResponse:
        await _unimplemented(context, "Compact")

    async def Fork(self, request: pb.ForkRequest, context: Ctx) -> pb.ForkResponse:
        await _unimplemented(context, "Fork")

    async def ExportCheckpoint(
        self, request: pb.ExportCheckpointRequest, context: Ctx
    ) -> pb.ExportCheckpointResponse:
        await _unimplemented(context, "ExportCheckpoint")

    async def ImportCheckpoint(
        self, request: pb.ImportCheckpointRequest, context: Ctx
    ) -> pb.ImportCheckpointResponse:
        await _unimplemented(context, "ImportCheckpoint")
