"""Export / import of checkpoints: round trips, and tampering refused with nothing written."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.checkpoints import EXPORT_FORMAT, verify_export
from journald.core.errors import CheckpointImportInvalid
from journald.core.schema import validate_payload
from tests.builders import TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, error_of, stub, until_unlocked

Conversation = list[tuple[str, Any]]


pytestmark = pytest.mark.shared_daemon("file")


@pytest.fixture
def s(daemon: Daemon) -> pbg.JournalServiceStub:
    return stub(daemon.target)


def conv(messages: Any) -> Conversation:
    return [(m.role, json.loads(m.content_json)) for m in messages]


def rich_run(s: pbg.JournalServiceStub, run_id: str, turns: int = 2) -> Lease:
    """Tool rounds, unicode, thinking and an opaque provider block."""
    lease = Lease(s, run_id, prompt="héllo ✓ 世界")
    for i in range(turns):
        content = [
            {"type": "thinking", "thinking": "hmm… 🤔", "signature": "c2ln"},
            text(f"step {i}"),
            {"type": "provider", "provider": "anthropic", "data": '{"x": 1.50e+3 , "y":[ ]}'},
            {"type": "tool_use", "id": f"{run_id}-{i}", "name": "read", "input": '{"p" : 1}'},
        ]
        lease.append(
            pb.Record(
                seq=lease.next_seq(),
                ts=TS,
                assistant=pb.AssistantPayload(
                    message=pb.Message(role="assistant", content_json=blocks(*content)),
                    iteration=i + 1,
                    stop_reason="tool_use",
                ),
            )
        )
        lease.append(lease.result(f"{run_id}-{i}", out=f"résultat {i}"))
    lease.append(lease.assistant())
    return lease


def fold_conv(s: pbg.JournalServiceStub, run_id: str) -> Conversation:
    return conv(s.Fold(pb.FoldRequest(run_id=run_id)).state.messages)


def snapshot(s: pbg.JournalServiceStub, run_id: str) -> tuple[list[bytes], list[str]]:
    records = [r.record.canonical for r in s.Load(pb.LoadRequest(run_id=run_id))]
    cps = s.ListCheckpoints(pb.ListCheckpointsRequest(run_id=run_id)).checkpoints
    return records, [c.checkpoint_id for c in cps]


def test_export_import_restore_and_fork_give_the_checkpoint_conversation(
    s: pbg.JournalServiceStub,
) -> None:
    src = rich_run(s, "ex-src")
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="ex-src", label="portable")).checkpoint
    expected = fold_conv(s, "ex-src")
    src.close()
    data = until_unlocked(
        lambda: s.ExportCheckpoint(
            pb.ExportCheckpointRequest(run_id="ex-src", checkpoint_id=mark.checkpoint_id)
        )
    ).data
    assert json.loads(data)["format"] == EXPORT_FORMAT
    target = Lease(s, "ex-dst", prompt="another conversation")
    target.append(target.assistant())
    imported = s.ImportCheckpoint(pb.ImportCheckpointRequest(run_id="ex-dst", data=data))
    cp = imported.checkpoint
    assert cp.run_id == "ex-dst"
    assert cp.checkpoint_id != mark.checkpoint_id
    assert cp.trigger == pb.CHECKPOINT_TRIGGER_IMPORT
    assert (cp.hash, cp.message_count, cp.label) == (mark.hash, mark.message_count, "portable")
    s.Restore(
        pb.RestoreRequest(
            run_id="ex-dst", checkpoint_id=cp.checkpoint_id, lease_id=target.lease.lease_id
        )
    )
    assert fold_conv(s, "ex-dst") == expected
    governed = s.Fold(pb.FoldRequest(run_id="ex-dst", governed=True))
    assert conv(governed.governed_messages) == expected
    assert governed.governance.synthesized_results == 0
    target.close()
    fork = s.Fork(
        pb.ForkRequest(run_id="ex-dst", checkpoint_id=cp.checkpoint_id, new_run_id="ex-fork")
    )
    assert conv(fork.state.messages) == expected
    assert fold_conv(s, "ex-fork") == expected
    # and the fork's own checkpoint exports to the same conversation again
    again = until_unlocked(lambda: s.Checkpoint(pb.CheckpointRequest(run_id="ex-fork"))).checkpoint
    assert again.hash == mark.hash
    # the source is untouched by all of it
    assert fold_conv(s, "ex-src") == expected


def flips(data: bytes, i: int) -> Iterator[bytes]:
    for mask in (0x01, 0x20):
        yield data[:i] + bytes([data[i] ^ mask]) + data[i + 1 :]


def test_changing_any_byte_of_a_small_export_is_detected(s: pbg.JournalServiceStub) -> None:
    lease = rich_run(s, "ex-sweep", turns=1)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="ex-sweep")).checkpoint
    data = s.ExportCheckpoint(
        pb.ExportCheckpointRequest(run_id="ex-sweep", checkpoint_id=mark.checkpoint_id)
    ).data
    lease.close()
    verify_export(data, validate_payload)  # the untouched bytes pass
    for i in range(len(data)):
        for bad in flips(data, i):
            with pytest.raises(CheckpointImportInvalid):
                verify_export(bad, validate_payload)
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(CheckpointImportInvalid):
            verify_export(data[:cut], validate_payload)
    with pytest.raises(CheckpointImportInvalid):
        verify_export(data + b"\n", validate_payload)


def test_an_export_with_a_repeated_key_is_refused_naming_the_key(
    s: pbg.JournalServiceStub,
) -> None:
    lease = rich_run(s, "ex-repeat", turns=1)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="ex-repeat")).checkpoint
    data = s.ExportCheckpoint(
        pb.ExportCheckpointRequest(run_id="ex-repeat", checkpoint_id=mark.checkpoint_id)
    ).data
    lease.close()
    assert data.startswith(b'{"body":')
    repeated = b'{"body":null,' + data[1:]  # json.loads would keep the second, real body
    with pytest.raises(CheckpointImportInvalid, match="the key 'body' appears twice"):
        verify_export(repeated, validate_payload)


def test_a_sampled_tampered_large_export_is_refused_with_nothing_written(
    s: pbg.JournalServiceStub,
) -> None:
    lease = rich_run(s, "ex-large", turns=60)
    mark = s.Checkpoint(pb.CheckpointRequest(run_id="ex-large")).checkpoint
    data = s.ExportCheckpoint(
        pb.ExportCheckpointRequest(run_id="ex-large", checkpoint_id=mark.checkpoint_id)
    ).data
    assert len(data) > 20_000
    rng = random.Random(6)
    for i in rng.sample(range(len(data)), 400):
        for bad in flips(data, i):
            with pytest.raises(CheckpointImportInvalid):
                verify_export(bad, validate_payload)
    before = snapshot(s, "ex-large")
    for i in rng.sample(range(len(data)), 12):
        bad = next(flips(data, i))
        with pytest.raises(grpc.RpcError) as info:
            s.ImportCheckpoint(pb.ImportCheckpointRequest(run_id="ex-large", data=bad))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_of(info.value).code == "checkpoint_import_invalid"
    assert snapshot(s, "ex-large") == before
    lease.close()


def test_exports_that_are_consistent_but_unsound_are_refused(s: pbg.JournalServiceStub) -> None:
    """Re-hashed edits (a forger who recomputes every hash) still fail the shape checks."""
    from journald.core.checkpoints import Checkpoint, CheckpointMeta, content_hash, export_bytes

    def forged(messages: list[dict[str, Any]], fmt: str = EXPORT_FORMAT) -> bytes:
        meta = CheckpointMeta(
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "ex-forged",
            "manual",
            "",
            3,
            len(messages),
            TS,
            "m",
            content_hash(messages),
        )
        out = export_bytes(Checkpoint(meta, messages))
        return out.replace(EXPORT_FORMAT.encode(), fmt.encode()) if fmt != EXPORT_FORMAT else out

    user = {"role": "user", "content": [text("hi")]}
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "x", "name": "n", "input": "{}"}],
    }
    cases = {
        "unanswered tool_use": [user, call],
        "bad block": [{"role": "user", "content": [{"type": "text"}]}],
        "bad role": [{"role": "system", "content": [text("x")]}],
    }
    lease = Lease(s, "ex-forged")
    before = snapshot(s, "ex-forged")
    for name, msgs in cases.items():
        with pytest.raises(CheckpointImportInvalid):
            verify_export(forged(msgs), validate_payload)
        with pytest.raises(grpc.RpcError) as info:
            s.ImportCheckpoint(pb.ImportCheckpointRequest(run_id="ex-forged", data=forged(msgs)))
        assert error_of(info.value).code == "checkpoint_import_invalid", name
    with pytest.raises(CheckpointImportInvalid, match="format"):
        verify_export(forged([user], "journald-checkpoint/2"), validate_payload)
    assert snapshot(s, "ex-forged") == before
    lease.close()
