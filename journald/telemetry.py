"""OpenTelemetry for the daemon (docs/design.md#operations): spans for every RPC and for the
store append, fsync and fold; metrics for append and fsync latency, open leases and bytes written.

Spans
    ``journald.v1.JournalService/<Method>`` (SERVER) for every JournalService RPC, a child of
    the caller's span when the call carries a W3C ``traceparent`` (the Python client sends
    one whenever its process has a current span); attributes ``rpc.system``,
    ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``, ``journald.run_id``, and
    ``journald.error.code`` on failure. A streaming RPC's span lasts as long as the stream
    (an ``Open`` span is the life of the lease).
    ``journald.store.append`` (child of the RPC span): ``journald.run_id``, ``journald.seq``
    (first new seq), ``journald.seq.last``, ``journald.core.records``, ``journald.bytes``.
    ``journald.fsync`` (child of the append that started the write; one per group commit):
    ``journald.run_id``, ``journald.seq``, ``journald.bytes``.
    ``journald.core.fold``: ``journald.run_id``, ``journald.core.records`` (when known),
    ``journald.seq.last``.

Metrics (meter ``journald``)
    ``journald.append.duration`` (histogram, s): a store append, from hand-over to durable
    (write, fsync, group-commit wait); attribute ``journald.outcome`` = ok | error.
    ``journald.fsync.duration`` (histogram, s): one fdatasync of a journal.
    ``journald.leases.open`` (observable gauge): writer leases held right now.
    ``journald.bytes.written`` (counter, By): journal bytes made durable by appends.

Configuration: the standard ``OTEL_*`` variables, read once at start-up by
``configure_from_env`` (``journald serve`` calls it). Tracing is on when
``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``) or, with it unset, when an
OTLP endpoint is given (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``…_TRACES_ENDPOINT``); metrics
likewise with ``OTEL_METRICS_EXPORTER`` / ``…_METRICS_ENDPOINT``. ``OTEL_SDK_DISABLED=true``
or ``none`` turns a signal off. Sampler, batch sizes, headers, resource attributes and
``OTEL_SERVICE_NAME`` are the SDK's own variables. OTLP over gRPC (the default) needs the
``opentelemetry-exporter-otlp-proto-grpc`` package, ``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``
needs ``opentelemetry-exporter-otlp-proto-http``; without it the daemon says so and runs
untraced.

Cost when nothing is configured: every hook below first checks one module global and
returns a shared no-op, so the append path pays a few
attribute loads and no allocation. ``bench/bench_tracing_overhead.py`` measures it.

Record stamping: a record whose writer did not set ``trace`` but whose Append carries a
``traceparent`` gets the caller's trace id and span id (the append pipeline stamps it, see
``journald.storage.pipeline``), whether or not
the daemon itself exports anything. A retried seq keeps the trace it was first stored with,
so an idempotent retry under a new span is still byte-identical.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, MeterProvider, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from journald.core.records import Record

log = logging.getLogger("journald.telemetry")
T = TypeVar("T")

SERVICE = "journald.v1.JournalService"
SCOPE = "journald"
SECONDS_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_NULL: contextlib.nullcontext[None] = contextlib.nullcontext()

# The whole state. None = off (the fast path checks these and nothing else).
_tracer: Tracer | None = None
_append_hist: Histogram | None = None
_fsync_hist: Histogram | None = None
_bytes: Counter | None = None
_lease_sources: list[Callable[[], int]] = []
_shutdown: list[Callable[[], Any]] = []


# --- set-up --------------------------------------------------------------------------------


def enabled() -> bool:
    """Whether spans are being recorded."""
    return _tracer is not None


def metrics_enabled() -> bool:
    return _append_hist is not None


def install(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Record spans / metrics with these providers (``configure_from_env`` uses it; tests
    install an in-memory exporter with it). ``None`` leaves that signal as it was."""
    global _tracer, _append_hist, _fsync_hist, _bytes
    if tracer_provider is not None:
        _tracer = tracer_provider.get_tracer(SCOPE)
    if meter_provider is not None:
        meter = meter_provider.get_meter(SCOPE)
        _append_hist = meter.create_histogram(
            "journald.append.duration",
            unit="s",
            description="Store append latency: hand-over to durable (write, fsync, group commit)",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        _fsync_hist = meter.create_histogram(
            "journald.fsync.duration",
            unit="s",
            description="Latency of one fdatasync of a journal file",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        _bytes = meter.create_counter(
            "journald.bytes.written", unit="By", description="Journal bytes made durable"
        )
        meter.create_observable_gauge(
            "journald.leases.open",
            callbacks=[_observe_leases],
            unit="{lease}",
            description="Writer leases held right now",
        )


def reset() -> None:
    """Back to the untraced state (tests; the daemon at exit after ``shutdown``)."""
    global _tracer, _append_hist, _fsync_hist, _bytes
    _tracer = _append_hist = _fsync_hist = _bytes = None
    _lease_sources.clear()


def observe_leases(count: Callable[[], int]) -> None:
    """Report ``count()`` as ``journald.leases.open`` at each metric collection."""
    _lease_sources.append(count)


def _observe_leases(options: CallbackOptions) -> Iterator[Observation]:
    yield Observation(sum(src() for src in _lease_sources))


def _exporters(environ: Mapping[str, str], signal: str) -> list[str]:
    """Exporter names for ``signal`` (traces / metrics) from the OTEL_* variables."""
    named = environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if named:
        return [n.strip() for n in named.split(",") if n.strip() and n.strip() != "none"]
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    )
    return ["otlp"] if endpoint else []


def _http(env: Mapping[str, str], signal: str) -> bool:
    """Whether OTLP for ``signal`` is configured as HTTP (else gRPC, the default)."""
    protocol = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"
    )
    return protocol.strip().lower().startswith("http")


def _otlp(signal: str, env: Mapping[str, str]) -> Any:
    """The OTLP exporter class for ``traces`` / ``metrics`` (an optional package, imported
    by name: ``ImportError`` when it is not installed)."""
    transport = "http" if _http(env, signal) else "grpc"
    module, cls = {
        "traces": ("trace_exporter", "OTLPSpanExporter"),
        "metrics": ("metric_exporter", "OTLPMetricExporter"),
    }[signal]
    mod = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{transport}.{module}")
    return getattr(mod, cls)


def _span_exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        return _otlp("traces", env)()
    raise ValueError(f"unsupported OTEL_TRACES_EXPORTER {name!r} (use otlp, console or none)")


def _metric_exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if name == "otlp":
        return _otlp("metrics", env)()
    raise ValueError(f"unsupported OTEL_METRICS_EXPORTER {name!r} (use otlp, console or none)")


def configure_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Set up exporters from the standard OTEL_* variables; returns what was done (a
    sentence for the log). With nothing configured, nothing is installed at all."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "telemetry off (OTEL_SDK_DISABLED=true)"
    traces, metrics = _exporters(env, "traces"), _exporters(env, "metrics")
    if not traces and not metrics:
        return "telemetry off (no OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER / OTLP endpoint)"
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    attrs = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "journald"}
    if "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attrs = {}
    resource = Resource.create(attrs)
    done = []
    try:
        if traces:
            from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            tp = SdkTracerProvider(resource=resource)
            for name in traces:
                tp.add_span_processor(BatchSpanProcessor(_span_exporter(name, env)))
            trace.set_tracer_provider(tp)
            install(tracer_provider=tp)
            _shutdown.append(tp.shutdown)
            done.append("traces → " + ", ".join(traces))
        if metrics:
            from opentelemetry import metrics as otel_metrics
            from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            readers = [PeriodicExportingMetricReader(_metric_exporter(n, env)) for n in metrics]
            mp = SdkMeterProvider(resource=resource, metric_readers=readers)
            otel_metrics.set_meter_provider(mp)
            install(meter_provider=mp)
            _shutdown.append(mp.shutdown)
            done.append("metrics → " + ", ".join(metrics))
    except ImportError as exc:
        package = "opentelemetry-exporter-otlp-proto-" + ("http" if ".http" in str(exc) else "grpc")
        log.warning(
            "OpenTelemetry export is configured but %s is missing (pip install %s); "
            "running untraced",
            exc.name,
            package,
        )
        reset()
        return f"telemetry off ({exc.name} missing: pip install {package})"
    except ValueError as exc:
        log.warning("%s; running without that exporter", exc)
        return f"telemetry partly off ({exc})"
    return "telemetry on: " + "; ".join(done)


def shutdown() -> None:
    """Flush and stop what ``configure_from_env`` started (daemon exit)."""
    while _shutdown:
        fn = _shutdown.pop()
        try:
            fn()
        except Exception:  # exporting must never block an exit
            log.warning("telemetry shutdown failed", exc_info=True)
    reset()


# --- trace context of the caller -------------------------------------------------------------


def _metadata(context: Any) -> Sequence[Any]:
    fn = getattr(context, "invocation_metadata", None)
    if fn is None:
        return ()
    try:
        return fn() or ()
    except Exception:  # a context without metadata
        return ()


def parse_traceparent(value: str | bytes) -> tuple[str, str] | None:
    """(trace id, span id) of a W3C ``traceparent`` value, or None if it is not valid."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    m = _TRACEPARENT.match(value.strip().lower())
    if m is None or m.group(1) == "ff":
        return None
    trace_id, span_id = m.group(2), m.group(3)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return trace_id, span_id


def incoming_trace(context: Any) -> tuple[str, str] | None:
    """(trace id, span id) of the caller's ``traceparent`` call metadata, if valid."""
    for item in _metadata(context):
        if item[0] == "traceparent":
            return parse_traceparent(item[1])
    return None


def stamp_open(request: Any, context: Any) -> None:
    """Give an ``OpenRequest`` without ``trace`` the caller's trace context (meta record)."""
    if request.trace.trace_id:
        return
    parent = incoming_trace(context)
    if parent is not None:
        request.trace.trace_id, request.trace.span_id = parent


def unstamped_parent(records: Sequence[Any], context: Any) -> tuple[str, str] | None:
    """The caller's trace context when some of ``records`` (pb) lack one, else None. Cheap
    when every record is stamped (the metadata is not even looked at)."""
    for r in records:
        if not r.trace.trace_id:
            return incoming_trace(context)
    return None


# --- RPC spans -------------------------------------------------------------------------------


def _rpc_attrs(method: str, request: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": method}
    run_id = getattr(request, "run_id", None)
    if isinstance(run_id, str) and run_id:
        attrs["journald.run_id"] = run_id
    return attrs


def _parent(context: Any) -> otel_context.Context:
    carrier = {str(k): v for k, v, *_ in _metadata(context) if isinstance(v, str)}
    return propagate.extract(carrier)


def _failed(span: Span, exc: BaseException) -> None:
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        import grpc

        status = getattr(grpc.StatusCode, str(getattr(exc, "grpc_status", "")), None)
        span.set_attribute("journald.error.code", code)
        span.set_attribute("rpc.grpc.status_code", status.value[0] if status else 2)
        span.set_status(Status(StatusCode.ERROR, f"{code}: {getattr(exc, 'message', exc)}"))
    elif isinstance(exc, (GeneratorExit, StopAsyncIteration)):
        span.set_attribute("rpc.grpc.status_code", 0)
    else:
        name = type(exc).__name__
        span.set_attribute("rpc.grpc.status_code", 1 if name == "CancelledError" else 2)
        span.set_status(Status(StatusCode.ERROR, name))


def traced_unary(method: str, request: Any, context: Any, call: Awaitable[T]) -> Awaitable[T]:
    """``call`` (the servicer coroutine) inside a SERVER span continuing the caller's trace;
    ``call`` itself when tracing is off."""
    if _tracer is None:
        return call
    return _unary(_tracer, method, request, context, call)


async def _unary(tracer: Tracer, method: str, request: Any, context: Any, call: Awaitable[T]) -> T:
    with tracer.start_as_current_span(
        f"{SERVICE}/{method}",
        context=_parent(context),
        kind=SpanKind.SERVER,
        attributes=_rpc_attrs(method, request),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            out = await call
        except BaseException as exc:
            _failed(span, exc)
            raise
        span.set_attribute("rpc.grpc.status_code", 0)
        return out


def traced_stream(
    method: str, request: Any, context: Any, stream: AsyncIterator[T]
) -> AsyncIterator[T]:
    """``stream`` inside a SERVER span lasting the whole stream; ``stream`` itself when
    tracing is off. The span is current only while the servicer runs (between items)."""
    if _tracer is None:
        return stream
    return _stream(_tracer, method, request, context, stream)


async def _stream(
    tracer: Tracer, method: str, request: Any, context: Any, stream: AsyncIterator[T]
) -> AsyncIterator[T]:
    parent = _parent(context)
    span = tracer.start_span(
        f"{SERVICE}/{method}",
        context=parent,
        kind=SpanKind.SERVER,
        attributes=_rpc_attrs(method, request),
    )
    active = trace.set_span_in_context(span, parent)
    it = stream.__aiter__()
    try:
        while True:
            token = otel_context.attach(active)
            try:
                item = await it.__anext__()
            except StopAsyncIteration:
                break
            finally:
                otel_context.detach(token)
            yield item
            del item  # not held while the stream waits (a held Open: the lease's life)
        span.set_attribute("rpc.grpc.status_code", 0)
    except BaseException as exc:
        _failed(span, exc)
        raise
    finally:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        span.end()


# --- store spans and metrics -----------------------------------------------------------------


class _Timed:
    """A span (when tracing) and a latency histogram (when metrics) around one operation."""

    __slots__ = ("_attrs", "_bytes", "_cm", "_hist", "_name", "_span", "_t0")

    def __init__(
        self, name: str, attrs: dict[str, Any], hist: Histogram | None, nbytes: int = 0
    ) -> None:
        self._name, self._attrs, self._hist, self._bytes = name, attrs, hist, nbytes
        self._cm: Any = None
        self._span: Span | None = None
        self._t0 = 0.0

    def __enter__(self) -> _Timed:
        if _tracer is not None:
            self._cm = _tracer.start_as_current_span(
                self._name, attributes=self._attrs, record_exception=False
            )
            self._span = self._cm.__enter__()
        self._t0 = time.perf_counter()
        return self

    def set(self, key: str, value: Any) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    def records(self, new: Sequence[Record]) -> None:
        self._bytes = sum(len(r.raw) + 1 for r in new)
        self.set("journald.core.records", len(new))
        self.set("journald.bytes", self._bytes)
        if new:
            self.set("journald.seq", new[0].seq)
            self.set("journald.seq.last", new[-1].seq)

    def __exit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter() - self._t0
        if self._hist is not None:
            self._hist.record(elapsed, {"journald.outcome": "ok" if et is None else "error"})
        if et is None and self._bytes and _bytes is not None:
            _bytes.add(self._bytes)
        if self._cm is not None:
            if exc is not None and self._span is not None:
                _failed(self._span, exc)
            self._cm.__exit__(et, exc, tb)


class _NoOp:
    __slots__ = ()

    def __enter__(self) -> _NoOp:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: Any) -> None:
        return None

    def records(self, new: Sequence[Record]) -> None:
        return None


_NOOP = _NoOp()


def store_append(run_id: str) -> _Timed | _NoOp:
    """Around an append from its planning to its durability: span ``journald.store.append``
    and the append histogram; ``records(new)`` names the records it writes once they are
    known (retried duplicates are not written). A group commit started under it is its child."""
    if _tracer is None and _append_hist is None:
        return _NOOP
    return _Timed("journald.store.append", {"journald.run_id": run_id}, _append_hist)


def fold_span(run_id: str, records: int | None = None) -> _Timed | _NoOp:
    """Around a fold: span ``journald.core.fold`` (``.set("journald.seq.last", n)`` when done)."""
    if _tracer is None:
        return _NOOP
    attrs: dict[str, Any] = {"journald.run_id": run_id}
    if records is not None:
        attrs["journald.core.records"] = records
    return _Timed("journald.core.fold", attrs, None)


def fsync_took(took_s: float, run_id: str = "", seq: int = 0, nbytes: int = 0) -> None:
    """Record one journal fdatasync that took ``took_s`` seconds (performed by the storage
    seam, ``journald.storage.seam``): span ``journald.fsync``, ending now, and the fsync
    histogram, when on."""
    if _fsync_hist is not None:
        _fsync_hist.record(took_s, {"journald.outcome": "ok"})
    if _tracer is None:
        return
    end_ns = time.time_ns()
    attrs: dict[str, str | int] = {
        "journald.run_id": run_id,
        "journald.seq": seq,
        "journald.bytes": nbytes,
    }
    span = _tracer.start_span(
        "journald.fsync", attributes=attrs, start_time=end_ns - int(took_s * 1e9)
    )
    span.end(end_time=end_ns)
