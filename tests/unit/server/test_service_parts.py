"""The daemon's servicer is composed of parts; every RPC of the proto has exactly one owner."""

from __future__ import annotations

import pytest
from journald_client.pb import journal_pb2 as pb

from journald.server.edge import implementation
from journald.server.service import JournalService
from journald.storage.memory import MemoryStore

SERVICE = pb.DESCRIPTOR.services_by_name["JournalService"]


def test_every_rpc_of_the_proto_is_implemented_by_exactly_one_part() -> None:
    parts = JournalService(MemoryStore()).parts()
    owners = {
        m.name: type(implementation(parts, m.name).__self__).__name__ for m in SERVICE.methods
    }
    assert owners["History"] == "HistoryRpcs"
    assert owners["PutAttachment"] == "AttachmentRpcs"
    assert owners["Restore"] == "CheckpointRpcs"
    assert owners["ExportCheckpointChunks"] == "CheckpointTransferRpcs"
    assert owners["ImportCheckpointChunks"] == "CheckpointTransferRpcs"
    assert owners["Append"] == "JournalService"


def test_an_rpc_no_part_implements_is_refused_at_start_up() -> None:
    with pytest.raises(TypeError, match="exactly one part"):
        implementation([object()], "History")


def test_an_rpc_two_parts_implement_is_refused_at_start_up() -> None:
    parts = JournalService(MemoryStore()).parts()
    with pytest.raises(TypeError, match="exactly one part"):
        implementation([*parts, parts[1]], "History")
