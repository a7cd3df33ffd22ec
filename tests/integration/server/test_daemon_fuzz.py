"""Hypothesis-generated garbage through the real RPC edge: every call either succeeds and the
journal grows by exactly what was acknowledged, or fails with a typed journald code and not a
byte changes. The daemon stays up throughout.

Every RPC also gets raw bytes (a generic channel, no serializer) and structurally valid
requests built from its descriptor with hostile values (huge and odd strings, deep JSON,
integers beyond 2^53, bad ids, invalid UTF-8): no call may end UNKNOWN or INTERNAL, every
refusal carries the ``journald-error-bin`` trailer, and the daemon answers health SERVING
after. Requests near the message cap, refused, must not leave the daemon's memory grown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from journald_client.pb import journal_pb2 as pb

from journald.core.errors import ERRORS_BY_CODE
from journald.core.records import MAX_SAFE_INT
from tests.daemon import Daemon
from tests.integration.conftest import BACKEND
from tests.integration.rpc import METHOD_PREFIX, RAW_BYTES, Lease, error_of, padded, stub
from tests.profiles import scaled
from tests.waiting import NotYet, eventually


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Lease]]:
    d = Daemon(tmp_path_factory.mktemp("fuzz"), BACKEND).start()
    holder = Lease(stub(d.target), "fuzz")
    try:
        yield d, holder
    finally:
        holder.close()
        d.stop()


json_ish = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"[]",
            b"{}",
            b"null",
            b'[{"type":"text","text":"ok"}]',
            b'[{"type":"text"}]',
            b'[{"type":"tool_use","id":"t","name":"n"}]',
            b'[{"type":"text","text":"x","n":1.5}]',
            b"[" * 50,
        ]
    ),
)
words = st.text(max_size=12)
ids = st.one_of(words, st.sampled_from(["fuzz", "../fuzz", "a/b", "", "x" * 200, "t1"]))


@st.composite
def garbage_record(draw: st.DrawFn) -> pb.Record:
    rec = pb.Record(
        seq=draw(st.integers(0, 12)),
        ts=draw(
            st.sampled_from(
                ["", "2026-11-30T12:00:00.000000Z", "not a time", "2026-13-45T99:99:99Z"]
            )
        ),
        format_version=draw(st.sampled_from([0, 0, 1, 2, 99])),
        type=draw(st.sampled_from(["", "", "journald.v1.record.user", "bogus"])),
        prev=draw(st.sampled_from(["", "f" * 64, "zz"])),
    )
    kind = draw(
        st.sampled_from(["none", "meta", "assistant", "tool_result", "user", "rebase", "terminal"])
    )
    if kind == "meta":
        rec.meta.CopyFrom(pb.MetaPayload(run_id=draw(ids), prompt_json=draw(json_ish)))
    elif kind == "assistant":
        rec.assistant.CopyFrom(
            pb.AssistantPayload(
                message=pb.Message(
                    role=draw(st.sampled_from(["assistant", "user", ""])),
                    content_json=draw(json_ish),
                ),
                iteration=draw(st.integers(0, 2**60)),
                stop_reason=draw(words),
            )
        )
    elif kind == "tool_result":
        rec.tool_result.CopyFrom(
            pb.ToolResultPayload(tool_use_id=draw(ids), content_json=draw(json_ish))
        )
    elif kind == "user":
        rec.user.CopyFrom(pb.UserPayload(content_json=draw(json_ish)))
    elif kind == "rebase":
        rec.rebase.CopyFrom(
            pb.RebasePayload(
                reason=draw(words),
                messages=[pb.Message(role=draw(words), content_json=draw(json_ish))],
            )
        )
    elif kind == "terminal":
        rec.terminal.CopyFrom(
            pb.TerminalPayload(
                reason=draw(st.sampled_from(["completed", "suspended", "boom", ""])),
                message=draw(words),
            )
        )
    if draw(st.booleans()):
        rec.trace.CopyFrom(pb.TraceContext(trace_id=draw(words), span_id=draw(words)))
    return rec


def _journal_bytes(s: object, run_id: str) -> list[bytes]:
    return [r.record.canonical for r in s.Load(pb.LoadRequest(run_id=run_id))]  # type: ignore[attr-defined]


@pytest.mark.slow  # ~20 s: 120 rounds of garbage through a real daemon
@settings(
    max_examples=scaled(120),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=st.lists(garbage_record(), min_size=1, max_size=3),
    run_id=st.sampled_from(["fuzz", "fuzz", "../fuzz", "", "other"]),
    lease_ok=st.booleans(),
)
def test_garbage_appends_either_land_exactly_or_change_nothing(
    fuzz_daemon: tuple[Daemon, Lease],
    records: list[pb.Record],
    run_id: str,
    lease_ok: bool,
) -> None:
    d, holder = fuzz_daemon
    s = stub(d.target)
    before = _journal_bytes(s, "fuzz")
    req = pb.AppendRequest(
        run_id=run_id, lease_id=holder.lease.lease_id if lease_ok else "x", records=records
    )
    failure: grpc.RpcError | None = None
    try:
        resp = s.Append(req, timeout=10)
    except grpc.RpcError as exc:
        failure = exc
    if failure is not None:
        assert error_of(failure).code in ERRORS_BY_CODE, failure
        assert _journal_bytes(s, "fuzz") == before
        return
    after = _journal_bytes(s, "fuzz")
    fresh = [a for a in resp.acks if not a.duplicate]
    assert len(after) == len(before) + len(fresh)
    assert after[: len(before)] == before


def test_the_daemon_still_serves_after_the_garbage(fuzz_daemon: tuple[Daemon, Lease]) -> None:
    d, _ = fuzz_daemon
    s = stub(d.target)
    lease = Lease(s, "after-fuzz")
    assert lease.append(lease.assistant()).acks[0].seq == 2
    s.Verify(pb.VerifyRequest(run_id="fuzz"))
    lease.close()


# --- every RPC: raw bytes and hostile values ----------------------------------------------------

SERVICE = pb.DESCRIPTOR.services_by_name["JournalService"]
METHODS = list(SERVICE.methods)
LONG_LIVED = {"Open", "Watch", "ListChanges"}  # streams open on success: read one answer, cancel
ALLOWED_WITHOUT_TRAILER = {
    grpc.StatusCode.RESOURCE_EXHAUSTED,  # over the message cap: refused by gRPC before us
    grpc.StatusCode.DEADLINE_EXCEEDED,  # a long-lived stream still open
    grpc.StatusCode.CANCELLED,
}
EDGE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def request_type(method: MethodDescriptor) -> Any:
    return getattr(pb, method.input_type.name)


def call_raw(channel: grpc.Channel, method: MethodDescriptor, data: bytes) -> grpc.RpcError | None:
    """Send ``data`` as one request of ``method``; the failure, or None if it was answered."""
    path = METHOD_PREFIX + method.name
    try:
        if method.client_streaming and not method.server_streaming:  # ImportCheckpointChunks
            channel.stream_unary(path, **RAW_BYTES)(iter([data]), timeout=10)
        elif method.client_streaming:
            list(channel.stream_stream(path, **RAW_BYTES)(iter([data]), timeout=10))
        elif method.server_streaming:
            call = channel.unary_stream(path, **RAW_BYTES)(
                data, timeout=2 if method.name in LONG_LIVED else 10
            )
            try:
                for _ in call:
                    if method.name in LONG_LIVED:
                        break
            finally:
                call.cancel()
        else:
            channel.unary_unary(path, **RAW_BYTES)(data, timeout=10)
    except grpc.RpcError as exc:
        return exc
    return None


def assert_typed(method: MethodDescriptor, failure: grpc.RpcError | None) -> None:
    if failure is None:
        return
    code = failure.code()
    assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (method.name, failure)
    if code in ALLOWED_WITHOUT_TRAILER:
        return
    assert error_of(failure).code in ERRORS_BY_CODE, (method.name, failure)


def health(target: str) -> int:
    with grpc.insecure_channel(target) as ch:
        return int(
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        )


@EDGE
@given(method=st.sampled_from(METHODS), data=st.binary(max_size=300))
def test_raw_bytes_to_every_rpc_get_a_typed_answer(
    fuzz_daemon: tuple[Daemon, Lease], method: MethodDescriptor, data: bytes
) -> None:
    d, _ = fuzz_daemon
    with grpc.insecure_channel(d.target) as channel:
        assert_typed(method, call_raw(channel, method, data))


def nested_json(depth: int) -> bytes:
    return b'[{"type":"text","text":"x","d":' + b"[" * (depth - 2) + b"]" * (depth - 2) + b"}]"


hostile_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            "hostile",
            "../x",
            "a/b",
            "\x00",
            "x" * 300_000,
            "é" * 3000,
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "f" * 64,
            "2026-11-30T12:00:00.000000+00:00",
            "2026-11-30T12:00:00.000000-00:00",
            "2026-11-30T12:00:00+05:30",
            "user",
            "assistant",
        ]
    ),
)
hostile_json = st.one_of(
    json_ish,
    st.sampled_from(
        [
            b"",
            b"[" * 100_000,
            b"{" * 5000,
            nested_json(128),
            nested_json(129),
            b'[{"type":"text","text":"x","n":%d}]' % (MAX_SAFE_INT + 1),
            b'[{"type":"text","text":"x","n":1e400}]',
            b"[" + b"9" * 5000 + b"]",
            b'["\xff\xfe"]',
            b'[{"type":"text","text":"' + b"y" * 300_000 + b'"}]',
        ]
    ),
)
UNSIGNED = (FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64)


def _int_for(field: FieldDescriptor) -> st.SearchStrategy[int]:
    wide = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)
    bits = 64 if field.cpp_type in wide else 32
    if field.cpp_type in UNSIGNED:
        values = [0, 1, 2, 3, MAX_SAFE_INT, MAX_SAFE_INT + 1, 2**bits - 1]
        return st.sampled_from([v for v in values if v < 2**bits])
    return st.sampled_from([0, 1, -1, 99, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1])


def _value(draw: st.DrawFn, field: FieldDescriptor) -> Any:
    if field.cpp_type == FieldDescriptor.CPPTYPE_STRING:
        return draw(hostile_json if field.type == FieldDescriptor.TYPE_BYTES else hostile_text)
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return draw(st.booleans())
    if field.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        assert field.enum_type is not None  # an enum field always names its enum
        return draw(st.sampled_from([v.number for v in field.enum_type.values] + [99]))
    return draw(_int_for(field))


def fill(draw: st.DrawFn, msg: Any, depth: int = 0) -> Any:
    """Set a random subset of ``msg``'s fields (from its descriptor) to hostile values."""
    for field in msg.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        holder = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for _ in range(draw(st.integers(0, 2))):
                holder[draw(hostile_text)] = draw(hostile_text)
        elif field.message_type is not None:
            if depth >= 3:
                continue
            if field.is_repeated:
                for _ in range(draw(st.integers(1, 2))):
                    fill(draw, holder.add(), depth + 1)
            else:
                holder.SetInParent()
                fill(draw, holder, depth + 1)
        elif field.is_repeated:
            for _ in range(draw(st.integers(0, 2))):
                holder.append(_value(draw, field))
        else:
            setattr(msg, field.name, _value(draw, field))
    return msg


@st.composite
def hostile_request(draw: st.DrawFn) -> tuple[MethodDescriptor, bytes]:
    method = draw(st.sampled_from(METHODS))
    msg = fill(draw, request_type(method)())
    data = msg.SerializeToString()
    strings = [f for f in msg.DESCRIPTOR.fields if f.type == FieldDescriptor.TYPE_STRING]
    if bool(strings) and draw(
        st.booleans()
    ):  # the same field again, its bytes not UTF-8 (last wins)
        f = draw(st.sampled_from(strings))
        data += bytes([f.number << 3 | 2, 2]) + b"\xff\xfe"
    return method, data


@EDGE
@given(request=hostile_request())
def test_hostile_values_in_every_rpc_get_a_typed_answer(
    fuzz_daemon: tuple[Daemon, Lease], request: tuple[MethodDescriptor, bytes]
) -> None:
    d, _ = fuzz_daemon
    method, data = request
    with grpc.insecure_channel(
        d.target, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    ) as channel:
        assert_typed(method, call_raw(channel, method, data))


def test_the_daemon_serves_after_every_rpc_was_fuzzed(fuzz_daemon: tuple[Daemon, Lease]) -> None:
    d, _ = fuzz_daemon
    assert health(d.target) == health_pb2.HealthCheckResponse.SERVING
    assert "Traceback" not in d.log(), d.log()[-4000:]


# --- memory after refused requests near the cap ------------------------------------------------

MIB = 1024 * 1024
PAD_BYTES = 12 * MIB  # under the 16 MiB default cap: every request reaches its handler
REFUSED_REQUESTS = 40
WITH_RUN_ID = [m for m in METHODS if m.client_streaming or "run_id" in m.input_type.fields_by_name]
SLACK_BYTES = 32 * MIB  # allocator and gRPC buffers that stay once touched


def refused(method: MethodDescriptor) -> bytes:
    """A request of ``method`` the daemon refuses (a run id that is not an id), padded."""
    if method.name == "Leases":
        return padded(pb.LeasesRequest(acquire=pb.OpenRequest(run_id="../x")), PAD_BYTES)
    if method.name == "ImportCheckpointChunks":
        return padded(pb.ImportCheckpointChunksRequest(run_id="../x"), PAD_BYTES)
    if method.client_streaming:
        return padded(pb.AppendStreamRequest(append=pb.AppendRequest(run_id="../x")), PAD_BYTES)
    return padded(request_type(method)(run_id="../x"), PAD_BYTES)


def test_refused_requests_near_the_cap_leave_the_daemon_memory_near_idle(tmp_path: Path) -> None:
    with Daemon(tmp_path, BACKEND) as d:
        idle = d.vm_rss_bytes()
        bound = idle * 3 // 2 + SLACK_BYTES
        with grpc.insecure_channel(
            d.target, options=[("grpc.max_send_message_length", 64 * MIB)]
        ) as channel:
            for i in range(REFUSED_REQUESTS):
                method = WITH_RUN_ID[i % len(WITH_RUN_ID)]
                if method.name == "Leases":  # refused in an answer on the stream, not a status
                    call = channel.stream_stream(METHOD_PREFIX + "Leases", **RAW_BYTES)
                    answers = call(iter([refused(method)]), timeout=10)
                    assert [pb.LeasesResponse.FromString(a).refused.code for a in answers] == [
                        "invalid_id"
                    ]
                    continue
                failure = call_raw(channel, method, refused(method))
                assert failure is not None, method.name
                assert_typed(method, failure)

        def trimmed() -> None:
            after = d.vm_rss_bytes()
            if after > bound:
                raise NotYet(f"VmRSS {after / MIB:.0f} MiB after, {idle / MIB:.0f} MiB idle")

        # the daemon trims its heap within a few seconds
        eventually(trimmed, what="the daemon's memory back near idle", timeout_s=60)
        assert health(d.target) == health_pb2.HealthCheckResponse.SERVING
