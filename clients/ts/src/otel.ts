/**
 * OpenTelemetry context propagation, optional: @opentelemetry/api is a peer dependency
 * loaded at run time when installed; without it nothing is added. With it, every RPC
 * carries the W3C `traceparent` (and `tracestate`) of the active span (or of the context
 * passed in call options) in gRPC metadata, so the daemon's spans continue the caller's
 * trace, and every record carries the writer's trace/span id.
 */
import { Metadata } from "@grpc/grpc-js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type OtelApi = any;

let api: OtelApi | null | undefined;

/** The @opentelemetry/api module, or null when it is not installed. */
export function otelApi(): OtelApi | null {
  if (api === undefined) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      api = require("@opentelemetry/api");
    } catch {
      api = null;
    }
  }
  return api ?? null;
}

export interface SpanIds {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: string;
}

/** The valid span context of `ctx` (an OTel Context; default: the active one), if any. */
export function spanIds(ctx?: unknown): SpanIds | undefined {
  const otel = otelApi();
  if (!otel) return undefined;
  const sc = otel.trace.getSpanContext(ctx ?? otel.context.active());
  if (!sc || !otel.isSpanContextValid(sc)) return undefined;
  return {
    traceId: sc.traceId,
    spanId: sc.spanId,
    traceFlags: sc.traceFlags ?? 0,
    traceState: sc.traceState?.serialize?.() || undefined,
  };
}

/** W3C traceparent for a span. */
export function traceparent(ids: SpanIds): string {
  return `00-${ids.traceId}-${ids.spanId}-${(ids.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** gRPC metadata carrying the W3C trace context of `ctx` (empty without a span). */
export function traceMetadata(ctx?: unknown): Metadata {
  const md = new Metadata();
  const ids = spanIds(ctx);
  if (ids) {
    md.set("traceparent", traceparent(ids));
    if (ids.traceState) md.set("tracestate", ids.traceState);
  }
  return md;
}
