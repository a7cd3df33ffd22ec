"""A writer's own ``edit`` rebase of a conversation larger than a record (a framework
session rewriting its items) is stored with message pages (docs/protocol.md#message-pages):
accepted, folded whole, and a retry of the same rebase is answered as a duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from tests.builders import TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, stub

ITEM_BYTES = 600 * 1024


def conversation(n: int) -> list[pb.Message]:
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(
            pb.Message(role=role, content_json=blocks(text(f"item {i} " + "e" * ITEM_BYTES)))
        )
    return out


@pytest.mark.slow
def test_an_edit_rebase_over_the_record_limit_is_stored_paged_and_its_retry_is_a_duplicate(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        s = stub(d.target)
        lease = Lease(s, "edited")
        msgs = conversation(9)  # about 5.4 MB inline: above the 4 MiB record limit
        rebase = pb.Record(
            seq=lease.next_seq(), ts=TS, rebase=pb.RebasePayload(reason="edit", messages=msgs)
        )
        first = lease.append(rebase).acks[0]
        again = lease.append(rebase).acks[0]
        assert again.duplicate
        assert again.hash == first.hash
        stored = [r.record for r in s.Load(pb.LoadRequest(run_id="edited"))][-1]
        payload = json.loads(stored.canonical)["rebase"]
        assert payload["reason"] == "edit"
        assert len(payload["pages"]) >= 4
        assert len(stored.canonical) < 1024 * 1024
        big = grpc.insecure_channel(
            d.target, options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        state = pbg.JournalServiceStub(big).Fold(pb.FoldRequest(run_id="edited")).state
        big.close()
        got = [(m.role, json.loads(m.content_json)) for m in state.messages]
        assert got == [(m.role, json.loads(m.content_json)) for m in msgs]
        s.Verify(pb.VerifyRequest(run_id="edited"))
        lease.close()
