import { test } from "node:test";
import * as assert from "node:assert/strict";
import { Metadata, status } from "@grpc/grpc-js";
import { context, trace, TraceFlags } from "@opentelemetry/api";
import {
  AttachmentNotFoundError,
  CheckpointNotFoundError,
  defaultSocketPath,
  ERRORS_BY_CODE,
  FingerprintDriftError,
  formatTimestamp,
  fromServiceError,
  GateError,
  LockedError,
  MAX_MESSAGE_BYTES,
  NotFoundError,
  pb,
  spanIds,
  target,
  traceMetadata,
  TransportError,
} from "../src";

test("default socket path follows the daemon's rules", () => {
  const uid = process.getuid!();
  assert.equal(defaultSocketPath({ JOURNALD_SOCKET: "/x/y.sock", XDG_RUNTIME_DIR: "/run/u" }), "/x/y.sock");
  assert.equal(defaultSocketPath({ XDG_RUNTIME_DIR: "/run/user/7" }), "/run/user/7/journald/journald.sock");
  assert.equal(defaultSocketPath({ TMPDIR: "/var/tmp" }), `/var/tmp/journald-${uid}/journald.sock`);
  assert.equal(defaultSocketPath({}), `/tmp/journald-${uid}/journald.sock`);
  assert.equal(target("/a/b.sock"), "unix:///a/b.sock");
});

test("timestamps are RFC 3339 UTC with microseconds", () => {
  assert.equal(formatTimestamp(new Date(Date.UTC(2026, 10, 30, 12, 0, 0, 7))), "2026-11-30T12:00:00.007000Z");
});

test("the journald-error-bin trailer picks the typed error", () => {
  const md = new Metadata();
  const detail = pb.ErrorDetail.encode({
    code: "fingerprint_drift",
    message: "drifted",
    metadata: { run_id: "r" },
    diff: ["model: a -> b"],
  }).finish();
  md.set("journald-error-bin", Buffer.from(detail));
  const err = fromServiceError({ code: status.FAILED_PRECONDITION, details: "drifted", metadata: md });
  assert.ok(err instanceof FingerprintDriftError);
  assert.ok(err instanceof GateError);
  assert.equal(err.code, "fingerprint_drift");
  assert.deepEqual(err.diff, ["model: a -> b"]);
  assert.equal(err.metadata.run_id, "r");
  assert.equal(err.grpcCode, status.FAILED_PRECONDITION);

  const locked = pb.ErrorDetail.encode({ code: "locked", message: "held", metadata: {}, diff: [] }).finish();
  const md2 = new Metadata();
  md2.set("journald-error-bin", Buffer.from(locked));
  assert.ok(fromServiceError({ code: status.ABORTED, details: "held", metadata: md2 }) instanceof LockedError);
});

test("attachment_not_found is its own not-found error", () => {
  const detail = pb.ErrorDetail.encode({ code: "attachment_not_found", message: "gone", metadata: {}, diff: [] });
  const md = new Metadata();
  md.set("journald-error-bin", Buffer.from(detail.finish()));
  const err = fromServiceError({ code: status.NOT_FOUND, details: "gone", metadata: md });
  assert.ok(err instanceof AttachmentNotFoundError);
  assert.ok(err instanceof NotFoundError);
  assert.ok(!(err instanceof CheckpointNotFoundError));
  assert.equal(ERRORS_BY_CODE.attachment_not_found, AttachmentNotFoundError);
  assert.equal(Object.keys(ERRORS_BY_CODE).length, 22);
});

test("the default message cap is 256 MiB, above the daemon's 64 MiB", () => {
  assert.equal(MAX_MESSAGE_BYTES, 256 * 1024 * 1024);
});

test("without the trailer the status code is the fallback", () => {
  const err = fromServiceError({ code: status.UNAVAILABLE, details: "no daemon", metadata: new Metadata() });
  assert.ok(err instanceof TransportError);
  assert.equal(err.code, "unavailable");
});

test("an OTel span context becomes a W3C traceparent in metadata", () => {
  const sc = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: TraceFlags.SAMPLED };
  const ctx = trace.setSpanContext(context.active(), sc);
  assert.deepEqual(traceMetadata(ctx).get("traceparent"), ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]);
  assert.equal(spanIds(ctx)?.spanId, "00f067aa0ba902b7");
  assert.deepEqual(traceMetadata(context.active()).get("traceparent"), []);
});
