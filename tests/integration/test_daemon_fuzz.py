"""Hypothesis-generated garbage through the real RPC edge: every call either succeeds and the
journal grows by exactly what was acknowledged, or fails with a typed journald code and not a
byte changes. The daemon stays up throughout."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from journald_client.pb import journal_pb2 as pb

from journald.errors import ERRORS_BY_CODE
from tests.daemon import Daemon
from tests.integration.conftest import BACKEND
from tests.integration.rpc import Lease, error_of, stub
from tests.profiles import scaled


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
