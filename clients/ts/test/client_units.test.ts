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
  InvalidCheckpointIdError,
  InternalError,
  InvalidDigestError,
  InvalidRecordError,
  InvalidRequestError,
  JournaldError,
  LockedError,
  MAX_MESSAGE_BYTES,
  NotFoundError,
  pb,
  ResponseTooLargeError,
  retryInPlace,
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
});

test("every ErrorCode word of the proto has its error class, and nothing else does", () => {
  const words = Object.keys(pb.ErrorCode)
    .filter((k) => /^ERROR_CODE_/.test(k) && k !== "ERROR_CODE_UNSPECIFIED")
    .map((k) => k.slice("ERROR_CODE_".length).toLowerCase());
  assert.deepEqual(Object.keys(ERRORS_BY_CODE).sort(), words.sort());
});

test("the edge's codes map to their own error classes", () => {
  const cases: Array<[string, number, unknown]> = [
    ["invalid_request", status.INVALID_ARGUMENT, InvalidRequestError],
    ["invalid_checkpoint_id", status.INVALID_ARGUMENT, InvalidCheckpointIdError],
    ["invalid_digest", status.INVALID_ARGUMENT, InvalidDigestError],
    ["response_too_large", status.RESOURCE_EXHAUSTED, ResponseTooLargeError],
  ];
  for (const [code, grpcCode, cls] of cases) {
    const detail = pb.ErrorDetail.encode({ code, message: "refused", metadata: {}, diff: [] });
    const md = new Metadata();
    md.set("journald-error-bin", Buffer.from(detail.finish()));
    const err = fromServiceError({ code: grpcCode, details: "refused", metadata: md });
    assert.ok(err instanceof (cls as typeof JournaldError), code);
    assert.ok(!(err instanceof InvalidRecordError), code);
    assert.equal((err as JournaldError).code, code);
  }
});

test("the default message cap is the daemon's 16 MiB", () => {
  assert.equal(MAX_MESSAGE_BYTES, 16 * 1024 * 1024);
});

test("a bare INTERNAL or UNKNOWN is the transport failing and retried as unavailable", () => {
  for (const code of [status.INTERNAL, status.UNKNOWN]) {
    const err = fromServiceError({ code, details: "Internal error from Core", metadata: new Metadata() });
    assert.ok(err instanceof JournaldError);
    assert.equal(err.code, "unavailable");
    assert.match(err.message, /Internal error from Core/);
    assert.ok(retryInPlace(err, 0));
  }
  const md = new Metadata();
  const bug = pb.ErrorDetail.encode({ code: "internal", message: "a daemon bug", metadata: {}, diff: [] }).finish();
  md.set("journald-error-bin", Buffer.from(bug));
  const own = fromServiceError({ code: status.INTERNAL, details: "a daemon bug", metadata: md });
  assert.ok(own instanceof InternalError);
  assert.equal(retryInPlace(own, 0), false);
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
