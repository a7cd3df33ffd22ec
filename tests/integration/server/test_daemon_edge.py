"""The RPC edge against hostile callers: sizes, nesting, undecodable bytes, echoed strings,
numbers and timestamps. Every refusal is a typed status with the ``journald-error-bin``
trailer, changes nothing, and leaves the daemon serving."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import uuid
from pathlib import Path
from typing import Any

import grpc
import journald_client as jc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from journald_client.pb import journal_pb2 as pb

from journald.core.checkpoints import MAX_ATTACHMENT_BYTES
from journald.core.records import MAX_JSON_DEPTH, MAX_SAFE_INT
from journald.server.convert import fingerprint_to_pb
from journald.server.daemon import ServeConfig, serve
from tests.builders import FP, TS, text
from tests.daemon import Daemon
from tests.integration.conftest import BACKEND
from tests.integration.rpc import (
    METHOD_PREFIX,
    RAW_BYTES,
    Lease,
    blocks,
    error_of,
    padded,
    raw_unary,
    stub,
    trailer,
)
from tests.waiting import NotYet, eventually_async

MIB = 1024 * 1024


def failure(fn: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


def serving(d: Daemon) -> bool:
    with grpc.insecure_channel(d.target) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


def user(seq: int, content: bytes, ts: str = TS) -> pb.Record:
    return pb.Record(seq=seq, ts=ts, user=pb.UserPayload(content_json=content))


def canonical_records(s: Any, run_id: str) -> list[bytes]:
    return [r.record.canonical for r in s.Load(pb.LoadRequest(run_id=run_id))]


# --- sizes (item 9) -------------------------------------------------------------------------


def test_a_request_above_the_16_mib_default_is_refused_and_the_daemon_serves_on(
    daemon: Daemon,
) -> None:
    big = padded(pb.VerifyRequest(run_id="r1"), 17 * MIB)
    exc = raw_unary(daemon.target, "Verify", big)
    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
    under = padded(pb.VerifyRequest(run_id="../x"), 15 * MIB)
    assert error_of(raw_unary(daemon.target, "Verify", under)).code == "invalid_id"
    assert serving(daemon)


def test_an_attachment_above_its_limit_is_refused_naming_the_limit_and_nothing_is_stored(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "att-big")
    too_big = pb.PutAttachmentRequest(
        run_id="att-big", data=b"\x01" * (MAX_ATTACHMENT_BYTES + 1), media_type="image/png"
    )
    err = error_of(failure(lambda: s.PutAttachment(too_big)))
    assert err.code == "invalid_request"
    assert "8 MiB" in err.message
    assert str(MAX_ATTACHMENT_BYTES) in err.metadata["limit_bytes"]
    assert not (daemon.data_dir / "sessions" / "att-big" / "attachments").exists()
    at_limit = pb.PutAttachmentRequest(
        run_id="att-big", data=b"\x02" * MAX_ATTACHMENT_BYTES, media_type="image/png"
    )
    assert s.PutAttachment(at_limit).size == MAX_ATTACHMENT_BYTES
    lease.close()


def test_a_response_above_the_message_cap_fails_with_a_typed_error(tmp_path: Path) -> None:
    with Daemon(tmp_path, BACKEND, "--max-message-bytes", "1MiB") as d:
        s = stub(d.target)
        lease = Lease(s, "wide")
        for _ in range(4):
            lease.append(user(lease.next_seq(), blocks(text("w" * 300_000))))
        lease.close()
        err = error_of(failure(lambda: s.Fold(pb.FoldRequest(run_id="wide"))))
        assert err.code == "response_too_large"
        assert "1048576" in err.message
        mark = s.Checkpoint(pb.CheckpointRequest(run_id="wide")).checkpoint
        export = pb.ExportCheckpointRequest(run_id="wide", checkpoint_id=mark.checkpoint_id)
        assert error_of(failure(lambda: s.ExportCheckpoint(export))).code == "response_too_large"
        assert len(canonical_records(s, "wide")) == 5
        assert serving(d)


def test_an_export_above_the_message_cap_moves_in_chunks_each_within_it(tmp_path: Path) -> None:
    """What ExportCheckpoint refuses above a 1 MiB cap, ExportCheckpointChunks sends in
    chunks of half the cap, and the client's import chunks fit the cap too."""
    with Daemon(tmp_path, BACKEND, "--max-message-bytes", "1MiB") as d:
        s = stub(d.target)
        lease = Lease(s, "wide")
        for _ in range(4):
            lease.append(user(lease.next_seq(), blocks(text("w" * 300_000))))
        lease.close()
        mark = s.Checkpoint(pb.CheckpointRequest(run_id="wide")).checkpoint
        export = pb.ExportCheckpointRequest(run_id="wide", checkpoint_id=mark.checkpoint_id)
        assert error_of(failure(lambda: s.ExportCheckpoint(export))).code == "response_too_large"
        req = pb.ExportCheckpointChunksRequest(run_id="wide", checkpoint_id=mark.checkpoint_id)
        chunks = [c.data for c in s.ExportCheckpointChunks(req)]
        assert len(chunks) > 2
        assert all(0 < len(c) <= MIB // 2 for c in chunks)
        Lease(s, "other").close()
        with jc.connect(str(d.socket), max_message_bytes=MIB) as client:
            imp = client.import_checkpoint("other", b"".join(chunks))
        assert imp.hash == mark.hash
        assert serving(d)


def requests_alive() -> list[object]:
    return [o for o in gc.get_objects() if isinstance(o, pb.VerifyRequest)]


async def all_freed() -> None:
    # counts without keeping the list: a list held across polls would keep its requests alive
    if held := len(requests_alive()):
        raise NotYet(f"{held} refused requests still referenced")


async def test_a_refused_request_is_freed_without_the_cycle_collector(tmp_path: Path) -> None:
    """The cause of the memory growth: a refusal must not tie the request into a reference
    cycle (exception, traceback, frame, request), which only a full collection frees."""
    sock = Path(f"/tmp/jde-{os.getpid()}-{uuid.uuid4().hex[:8]}/journald.sock")
    cfg = ServeConfig(socket_path=sock, data_dir=tmp_path / "data", backend=BACKEND)
    ready, stop = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(serve(cfg, ready, stop))
    started = asyncio.create_task(ready.wait())
    await asyncio.wait({server, started}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    assert ready.is_set(), "the in-process daemon did not start within 30 s"
    data = padded(pb.VerifyRequest(run_id="../x"), MIB)
    gc.disable()
    try:
        for _ in range(3):
            exc = await asyncio.to_thread(raw_unary, f"unix://{sock}", "Verify", data)
            assert error_of(exc).code == "invalid_id"
        # gRPC's server loop holds its latest call until the next one arrives
        await asyncio.to_thread(lambda: stub(f"unix://{sock}").List(pb.ListRequest()))
        # the call's last references go a tick after it
        await eventually_async(all_freed, what="the refused requests to be freed")
    finally:
        gc.enable()
        stop.set()
        await asyncio.wait_for(server, 30)


# --- nesting (item 10) ----------------------------------------------------------------------


def nested(depth: int) -> bytes:
    """A content array whose deepest value sits ``depth`` JSON levels down."""
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return f'[{{"type":"text","text":"x","deep":{inner}}}]'.encode()


def nested_results(levels: int, leaf: dict[str, Any]) -> bytes:
    """Tool results within tool results, ``levels`` deep (2 JSON levels each)."""
    block = leaf
    for _ in range(levels):
        block = {"type": "tool_result", "tool_use_id": "t", "content": [block], "is_error": False}
    return json.dumps([block]).encode()


def test_json_nested_deeper_than_the_limit_is_refused_everywhere_it_enters(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "deep")
    bomb = b"[" * 100_000
    before = canonical_records(s, "deep")
    for content in (bomb, nested(MAX_JSON_DEPTH + 1)):
        err = error_of(failure(lambda c=content: lease.append(user(2, c))))
        assert err.code == "invalid_record", err
        assert str(MAX_JSON_DEPTH) in err.message
        assert "user.content_json" in err.message
    assert canonical_records(s, "deep") == before
    lease.append(user(2, nested(MAX_JSON_DEPTH)))  # at the limit: stored
    wrong_leaf = nested_results(MAX_JSON_DEPTH // 2 - 1, {"type": "text", "text": 1})
    err = error_of(failure(lambda: lease.append(user(3, wrong_leaf))))
    assert err.code == "invalid_record", err

    open_deep = pb.OpenRequest(
        run_id="deep-open", prompt_json=bomb, fingerprint=fingerprint_to_pb(FP)
    )
    err = error_of(failure(lambda: next(iter(s.Open(open_deep)))))
    assert err.code == "invalid_record"
    assert "meta.prompt_json" in err.message
    assert s.List(pb.ListRequest()).runs
    assert all(r.run_id != "deep-open" for r in s.List(pb.ListRequest()).runs)

    compact = pb.CompactRequest(
        run_id="deep",
        lease_id=lease.lease.lease_id,
        summary=[pb.Message(role="user", content_json=bomb)],
    )
    err = error_of(failure(lambda: s.Compact(compact)))
    assert err.code == "invalid_record"
    assert "summary[0]" in err.message

    importing = pb.ImportCheckpointRequest(run_id="deep", data=b'{"format":' + bomb)
    err = error_of(failure(lambda: s.ImportCheckpoint(importing)))
    assert err.code == "checkpoint_import_invalid"
    assert str(MAX_JSON_DEPTH) in err.message
    lease.close()


# --- undecodable bytes (item 11) ------------------------------------------------------------


def bad_utf8_run_id() -> bytes:
    """A VerifyRequest whose run_id (field 1, a proto3 string) is not UTF-8."""
    return b"\x0a\x02\xff\xfe"


def test_undecodable_request_bytes_are_invalid_request_with_the_trailer_logged_once(
    daemon: Daemon,
) -> None:
    for _ in range(5):
        for data in (b"\xff\xff\xff\xff\xff", bad_utf8_run_id()):
            exc = raw_unary(daemon.target, "Verify", data)
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
            err = error_of(exc)
            assert err.code == "invalid_request"
            assert "journald.v1.VerifyRequest" in err.message
    with grpc.insecure_channel(daemon.target) as ch:
        stream = ch.stream_stream(METHOD_PREFIX + "AppendStream", **RAW_BYTES)(iter([b"\xff\xff"]))
        with pytest.raises(grpc.RpcError) as info:
            list(stream)
    assert error_of(info.value).code == "invalid_request"
    assert serving(daemon)
    log = daemon.log()
    assert "Traceback" not in log
    warned = [line for line in log.splitlines() if "WARNING" in line and "undecodable" in line]
    assert len(warned) == 1, log


# --- codes (item 12) ------------------------------------------------------------------------


def test_a_bad_checkpoint_id_and_a_bad_digest_have_their_own_codes(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "codes")
    for call in (
        lambda: s.DeleteCheckpoint(pb.DeleteCheckpointRequest(run_id="codes", checkpoint_id="x")),
        lambda: s.ExportCheckpoint(pb.ExportCheckpointRequest(run_id="codes", checkpoint_id="x")),
        lambda: list(
            s.ExportCheckpointChunks(
                pb.ExportCheckpointChunksRequest(run_id="codes", checkpoint_id="x")
            )
        ),
        lambda: s.Restore(
            pb.RestoreRequest(run_id="codes", checkpoint_id="../x", lease_id=lease.lease.lease_id)
        ),
    ):
        exc = failure(call)
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_of(exc).code == "invalid_checkpoint_id"
    exc = failure(lambda: s.GetAttachment(pb.GetAttachmentRequest(run_id="codes", sha256="zz")))
    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_of(exc).code == "invalid_digest"
    lease.close()


# --- echoed strings (item 13) ---------------------------------------------------------------


def trailer_bytes(exc: grpc.RpcError) -> int:
    md = trailer(exc)
    return sum(len(k) + len(v) for k, v in md) + len(exc.details() or "")


def test_a_client_name_over_256_bytes_is_refused_at_open(daemon: Daemon) -> None:
    s = stub(daemon.target)
    err = error_of(failure(lambda: Lease(s, "long-name", name="n" * 3000)))
    assert err.code == "invalid_request"
    assert "client.name" in err.message
    assert "256" in err.message
    assert all(r.run_id != "long-name" for r in s.List(pb.ListRequest()).runs)


def test_a_holder_at_every_limit_still_gets_other_openers_a_locked_error(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    holder = Lease(s, "crowded", name="é" * 128, host="h" * 255)
    exc = failure(lambda: Lease(s, "crowded", name="second"))
    assert error_of(exc).code == "locked"
    assert trailer_bytes(exc) < 4096
    holder.close()


def test_echoed_values_are_cut_so_the_trailer_stays_small(daemon: Daemon) -> None:
    s = stub(daemon.target)
    holder = Lease(s, "echo")
    forged = pb.AppendRequest(
        run_id="echo", lease_id="L" * 100_000, records=[user(2, blocks(text("hi")))]
    )
    exc = failure(lambda: s.Append(forged))
    err = error_of(exc)
    assert err.code == "lease_lost"
    assert err.message.endswith("continue at its last seq + 1")
    assert trailer_bytes(exc) < 4096
    bad_role = pb.AppendRequest(
        run_id="echo",
        lease_id=holder.lease.lease_id,
        records=[
            pb.Record(
                seq=2,
                ts=TS,
                assistant=pb.AssistantPayload(
                    message=pb.Message(role="r" * 200_000, content_json=blocks(text("x"))),
                    iteration=1,
                    stop_reason="end_turn",
                ),
            )
        ],
    )
    exc = failure(lambda: s.Append(bad_role))
    assert error_of(exc).code == "invalid_record"
    assert trailer_bytes(exc) < 4096
    holder.close()


# --- numbers (item 15) ----------------------------------------------------------------------


def test_integers_beyond_the_safe_range_are_refused_naming_the_field(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "ints")
    before = canonical_records(s, "ints")
    for value in (MAX_SAFE_INT + 1, -(MAX_SAFE_INT + 1), 10**30):
        content = json.dumps([{"type": "text", "text": "x", "n": value}]).encode()
        err = error_of(failure(lambda c=content: lease.append(user(2, c))))
        assert err.code == "invalid_record"
        assert "user.content[0].n" in err.message
        assert "2^53" in err.message
    assert canonical_records(s, "ints") == before
    ok = json.dumps([{"type": "text", "text": "x", "n": -MAX_SAFE_INT}]).encode()
    assert lease.append(user(2, ok)).acks[0].seq == 2
    lease.close()


# --- timestamps (item 16) -------------------------------------------------------------------


def test_a_plus_zero_offset_is_stored_as_z_and_other_offsets_are_refused(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "times")
    plus = "2026-11-30T12:00:00.000000+00:00"
    ack = lease.append(user(2, blocks(text("hi")), ts=plus)).acks[0]
    again = lease.append(user(2, blocks(text("hi")), ts=plus)).acks[0]
    assert again.duplicate
    assert again.hash == ack.hash
    stored = json.loads(canonical_records(s, "times")[-1])
    assert stored["ts"] == "2026-11-30T12:00:00.000000Z"
    for ts, says in (
        ("2026-11-30T12:00:00.000000-00:00", "unknown"),
        ("2026-11-30T14:00:00.000000+02:00", "UTC only, end with Z"),
    ):
        late = user(3, blocks(text("x")), ts=ts)
        err = error_of(failure(lambda r=late: lease.append(r)))
        assert err.code == "invalid_record"
        assert says in err.message, err.message
    lease.close()

    opening = pb.OpenRequest(
        run_id="times-open",
        created=plus,
        prompt_json=blocks(text("p")),
        fingerprint=fingerprint_to_pb(FP),
    )
    call = s.Open(opening)
    next(iter(call))
    meta = json.loads(canonical_records(s, "times-open")[0])
    assert meta["ts"] == meta["meta"]["created"] == "2026-11-30T12:00:00.000000Z"
    call.cancel()
