/**
 * What the tests against a live daemon share: JOURNALD_TEST_SOCKET names its socket
 * (tests/integration/client/test_polyglot.py sets it and runs them); without it they skip.
 */
import { sendUnaryData, Server, ServerCredentials } from "@grpc/grpc-js";
import { Client, computeFingerprint, Run, text } from "../src";

export const socket = process.env.JOURNALD_TEST_SOCKET;
export const live = { skip: socket ? false : "JOURNALD_TEST_SOCKET is not set (needs a running daemon)" };

export const fingerprint = computeFingerprint({
  provider: "anthropic",
  model: "claude-test",
  systemPrompt: ["live"],
  maxTokens: 16,
  maxIterations: 8,
});

export interface Started {
  client: Client;
  run: Run;
}

/**
 * Start a run on its own connection (to `at`, default the daemon) whose clock ticks one
 * second per stamp from a fixed instant, so two runs given the same entries store the same
 * timestamps.
 */
export async function startRun(prefix: string, at = socket): Promise<Started> {
  let next = Date.parse("2026-12-01T09:00:00Z");
  const clock = () => new Date((next += 1000) - 1000);
  const client = await Client.connect({ socket: at, clientName: "ts-live", clock });
  const runId = `${prefix}-${process.hrtime.bigint()}`;
  const run = await client.start({ runId, fingerprint, prompt: [text("ts")] });
  return { client, run };
}

/** Close the run, then its connection. */
export async function finish(c: Started): Promise<void> {
  await c.run.close();
  c.client.close();
}

/** Run body on a started run, closed whatever happens. */
export async function withRun(prefix: string, body: (c: Started) => Promise<void>): Promise<void> {
  const c = await startRun(prefix);
  try {
    await body(c);
  } finally {
    await finish(c);
  }
}

/** Serve grpc.health.v1 (always SERVING) beside `server`'s services and bind it to `sock`. */
export async function serveWithHealth(server: Server, sock: string): Promise<void> {
  const health = {
    check: {
      path: "/grpc.health.v1.Health/Check",
      requestStream: false,
      responseStream: false,
      requestSerialize: (b: Buffer) => b,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: (b: Buffer) => b,
      responseDeserialize: (b: Buffer) => b,
    },
  };
  // HealthCheckResponse{status: SERVING}: field 1, varint 1
  server.addService(health, { check: (_: unknown, done: sendUnaryData<Buffer>) => done(null, Buffer.from([8, 1])) });
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix:${sock}`, ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );
}
