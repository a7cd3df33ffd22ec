"""OpenTelemetry is optional: with a current span the client stamps records and sends a W3C
traceparent; without one it sends nothing extra."""

from __future__ import annotations

import journald_client as jc
from journald_client import codec, telemetry
from opentelemetry.sdk.trace import TracerProvider

from tests.integration.clientbin.common import FP

TRACER = TracerProvider().get_tracer("journald-client-test")


def test_without_a_current_span_nothing_is_added() -> None:
    assert telemetry.current_trace() is None
    assert codec.metadata() == ()
    assert not jc.Entry.user("hi").record.HasField("trace")


def test_inside_a_span_records_carry_its_trace_and_calls_carry_a_traceparent() -> None:
    with TRACER.start_as_current_span("agent-step") as span:
        ctx = span.get_span_context()
        trace_id, span_id = f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
        rec = jc.Entry.tool_result("t1", "ok").record
        assert (rec.trace.trace_id, rec.trace.span_id) == (trace_id, span_id)
        flags = f"{int(ctx.trace_flags):02x}"
        assert codec.metadata() == (("traceparent", f"00-{trace_id}-{span_id}-{flags}"),)
        params = codec.OpenParams("r", FP, False, False, "n")
        req = codec.open_request(params, create=True, prompt="hi")
        assert req.trace.trace_id == trace_id
