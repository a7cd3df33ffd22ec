"""Optional OpenTelemetry glue: W3C ``traceparent`` on every call, ``trace`` on records.

OpenTelemetry is not a dependency: when ``opentelemetry`` is not importable, or no tracer
provider is configured (so the current span context is invalid), both helpers return
nothing and the client behaves exactly the same otherwise.
"""

from __future__ import annotations

from typing import Any

_trace: Any
_propagator: Any
try:  # pragma: no cover - exercised only where opentelemetry is installed
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _propagator = TraceContextTextMapPropagator()
except ImportError:  # pragma: no cover
    _trace = None
    _propagator = None


def current_trace() -> tuple[str, str, int] | None:
    """(trace_id hex, span_id hex, trace flags) of the current span, if there is a valid one."""
    if _trace is None:
        return None
    ctx = _trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", int(ctx.trace_flags)


def call_metadata() -> list[tuple[str, str]]:
    """gRPC metadata carrying the current W3C trace context (empty without one)."""
    if current_trace() is None:
        return []
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)  # traceparent (+ tracestate when set)
    return sorted(carrier.items())
