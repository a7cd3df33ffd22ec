"""OpenTelemetry through a real daemon: the server runs in this process (``daemon.serve`` on a
temp socket, file backend) with an in-memory span exporter and metric reader installed, so
its spans can be inspected; the agent side is the real Python client on its own thread,
calling over the unix socket like any agent process would.

Shown: the agent's span is the parent of the daemon's RPC span, which is the ancestor of the
store append, fsync and fold spans; the stored record carries the agent's trace id; a record
appended without ``trace`` but under a ``traceparent`` is stamped by the daemon (also with
tracing off); and the append/fsync/bytes/lease metrics are recorded.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from journald_client import Client, Fingerprint
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from journald import telemetry
from journald.server.daemon import ServeConfig, serve

T = TypeVar("T")
FP = Fingerprint(
    provider="anthropic",
    model="claude-test",
    system_prompt_sha256="0" * 64,
    tools_sha256="1" * 64,
    thinking="off",
    max_tokens=1024,
    max_iterations=20,
)
APPEND_RPC = "journald.v1.JournalService/Append"


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metric_points(self) -> dict[str, list[Any]]:
        data = self.metrics.get_metrics_data()
        out: dict[str, list[Any]] = {}
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend(m.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    telemetry.install(o.tracer_provider, o.meter_provider)
    try:
        yield o
    finally:
        telemetry.reset()
        o.tracer_provider.shutdown()
        o.meter_provider.shutdown()


async def with_daemon(tmp_path: Path, agent: Callable[[str], T]) -> T:
    """Serve in-process on a temp socket, run ``agent(socket)`` on a thread, stop."""
    sock = Path(f"/tmp/jdt-{os.getpid()}-{uuid.uuid4().hex[:8]}/journald.sock")
    cfg = ServeConfig(socket_path=sock, data_dir=tmp_path / "data", backend="file")
    ready, stop = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(serve(cfg, ready, stop))
    started = asyncio.create_task(ready.wait())
    await asyncio.wait({server, started}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if server.done():
        server.result()  # raise the start-up failure
    assert ready.is_set(), "the in-process daemon did not start within 30 s"
    try:
        return await asyncio.to_thread(agent, str(sock))
    finally:
        stop.set()
        await asyncio.wait_for(server, 30)
        sock.parent.rmdir() if sock.parent.exists() and not any(sock.parent.iterdir()) else None


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_the_agent_span_parents_the_rpc_span_which_parents_append_fsync_and_fold(
    tmp_path: Path, otel: Otel
) -> None:
    def agent(sock: str) -> tuple[Any, list[Any]]:
        tracer = otel.tracer_provider.get_tracer("agent")
        with Client(sock) as jd:
            jd.wait_ready(30)  # a loaded machine can be slow to finish the handshake
            run = jd.start("traced-run", FP, "hello", name="agent")
            with tracer.start_as_current_span("agent.model_call") as span:
                run.assistant("hi there", stop_reason="end_turn")
            run.close()
            return span.get_span_context(), list(jd.load("traced-run"))

    agent_ctx, records = await with_daemon(tmp_path, agent)
    spans = otel.finished()

    appends = by_name(spans, APPEND_RPC)
    rpc = next(s for s in appends if s.context.trace_id == agent_ctx.trace_id)
    assert rpc.kind == SpanKind.SERVER
    assert parent_id(rpc) == agent_ctx.span_id
    assert rpc.attributes is not None
    assert rpc.attributes["journald.run_id"] == "traced-run"
    assert rpc.attributes["rpc.grpc.status_code"] == 0

    store = next(
        s for s in by_name(spans, "journald.store.append") if parent_id(s) == rpc.context.span_id
    )
    assert store.context.trace_id == agent_ctx.trace_id
    assert store.attributes is not None
    assert store.attributes["journald.seq"] == 2
    assert store.attributes["journald.bytes"] == len(records[1].canonical) + 1

    fsync = next(
        s for s in by_name(spans, "journald.fsync") if parent_id(s) == store.context.span_id
    )
    assert fsync.context.trace_id == agent_ctx.trace_id
    assert fsync.attributes is not None
    assert fsync.attributes["journald.run_id"] == "traced-run"

    fold = [s for s in by_name(spans, "journald.core.fold") if parent_id(s) == rpc.context.span_id]
    assert fold, "the append folds the new record into the run's state under the RPC span"

    # the record the agent wrote carries the agent's trace context
    assert records[1].trace == {
        "trace_id": f"{agent_ctx.trace_id:032x}",
        "span_id": f"{agent_ctx.span_id:016x}",
    }


async def test_append_fsync_bytes_and_lease_metrics_are_recorded(
    tmp_path: Path, otel: Otel
) -> None:
    def agent(sock: str) -> int:
        with Client(sock) as jd:
            jd.wait_ready(30)
            run = jd.start("metered-run", FP, "hello")
            run.assistant("one", stop_reason="end_turn")
            run.user("two")
            run.close()
            return run.last_seq

    assert await with_daemon(tmp_path, agent) == 3
    points = otel.metric_points()
    assert sum(p.count for p in points["journald.append.duration"]) >= 2
    assert sum(p.count for p in points["journald.fsync.duration"]) >= 3  # meta + 2 appends
    assert sum(p.value for p in points["journald.bytes.written"]) > 0
    assert "journald.leases.open" in points


def _append_under_traceparent(sock: str, traceparent: str) -> list[pb.Record]:
    """Raw stub: Open, then Append a record WITHOUT trace but with a traceparent header."""
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        stub = pbg.JournalServiceStub(ch)
        call = stub.Open(
            pb.OpenRequest(
                run_id="stamped-run",
                mode=pb.OPEN_MODE_CREATE,
                fingerprint=FP.to_pb(),
                prompt_json=b'[{"text":"hi","type":"text"}]',
            ),
            metadata=(("traceparent", traceparent),),
        )
        lease = next(iter(call)).lease
        rec = pb.Record(
            seq=2,
            ts="2026-11-30T12:00:00.000000Z",
            user=pb.UserPayload(content_json=b'[{"text":"more","type":"text"}]'),
        )
        req = pb.AppendRequest(run_id="stamped-run", lease_id=lease.lease_id, records=[rec])
        stub.Append(req, metadata=(("traceparent", traceparent),))
        # a retry of the same seq under another span is still the same record
        other = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        retry = stub.Append(req, metadata=(("traceparent", other),))
        assert retry.acks[0].duplicate
        call.cancel()
        return [m.record for m in stub.Load(pb.LoadRequest(run_id="stamped-run"))]


@pytest.mark.parametrize("tracing", [True, False], ids=["tracing on", "tracing off"])
async def test_a_record_without_trace_is_stamped_from_the_callers_traceparent(
    tmp_path: Path, tracing: bool, request: pytest.FixtureRequest
) -> None:
    if tracing:
        request.getfixturevalue("otel")
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    tp = f"00-{trace_id}-{span_id}-01"
    stored = await with_daemon(tmp_path, lambda sock: _append_under_traceparent(sock, tp))
    assert [(r.trace.trace_id, r.trace.span_id) for r in stored] == [(trace_id, span_id)] * 2


def test_tracing_stays_off_without_otel_environment_variables() -> None:
    assert telemetry.configure_from_env({}).startswith("telemetry off")
    assert telemetry.configure_from_env({"OTEL_TRACES_EXPORTER": "none"}).startswith(
        "telemetry off"
    )
    assert not telemetry.enabled()


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("00-" + "a" * 32 + "-" + "b" * 16 + "-01", ("a" * 32, "b" * 16)),
        ("00-" + "A" * 32 + "-" + "B" * 16 + "-00", ("a" * 32, "b" * 16)),
        ("00-" + "0" * 32 + "-" + "b" * 16 + "-01", None),
        ("00-" + "a" * 32 + "-" + "0" * 16 + "-01", None),
        ("ff-" + "a" * 32 + "-" + "b" * 16 + "-01", None),
        ("garbage", None),
    ],
)
def test_a_traceparent_is_parsed_strictly(header: str, parsed: tuple[str, str] | None) -> None:
    assert telemetry.parse_traceparent(header) == parsed
