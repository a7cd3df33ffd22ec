import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  sendUnaryData,
  Server,
  ServerDuplexStream,
  ServerUnaryCall,
  ServerWritableStream,
} from "@grpc/grpc-js";
import { Client, computeFingerprint, Entry, text } from "../src";
import { COALESCED_MESSAGE_BYTES, streamMessages } from "../src/coalesce";
import { serveWithHealth } from "./live";
import {
  AppendRequest,
  AppendResponse,
  AppendStreamRequest,
  AppendStreamResponse,
  Durability,
  JournalServiceServer,
  JournalServiceService,
  OpenRequest,
  OpenResponse,
  ReleaseRequest,
  ReleaseResponse,
} from "../src/gen/journald/v1/journal";

interface StubDaemon {
  socket: string;
  /** Appends per AppendStream message, in arrival order. */
  messages: number[];
  stop(): void;
}

/**
 * Stands in for the daemon where the suite runs without one (scripts/test_clients.sh): it
 * grants a lease saying whether it takes coalesced messages and acknowledges every append of
 * every AppendStream message, counting the appends each carried. The same writer against the
 * real daemon runs in tests/integration/client/test_polyglot.py.
 */
async function startStubDaemon(batches: boolean): Promise<StubDaemon> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "jd-stub")); // a socket path stays short
  const server = new Server();
  const d: StubDaemon = {
    socket: path.join(dir, "journald.sock"),
    messages: [],
    stop: () => {
      server.forceShutdown();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  const impl: Partial<JournalServiceServer> = {
    open: (call: ServerWritableStream<OpenRequest, OpenResponse>) => {
      const lease = {
        leaseId: "lease-1",
        runId: call.request.runId,
        created: true,
        lastSeq: 1,
        appendStreamBatches: batches,
      };
      call.write(OpenResponse.fromPartial({ lease }));
    },
    release: (_: ServerUnaryCall<ReleaseRequest, ReleaseResponse>, done: sendUnaryData<ReleaseResponse>) =>
      done(null, { released: true }),
    appendStream: (call: ServerDuplexStream<AppendStreamRequest, AppendStreamResponse>) => {
      call.on("data", (m: AppendStreamRequest) => {
        const appends = m.appends.length > 0 ? m.appends : [m.append as AppendRequest];
        d.messages.push(appends.length);
        const answers: AppendResponse[] = appends.map((a) => ({
          acks: a.records.map((r) => ({
            seq: r.seq,
            hash: "0".repeat(64),
            durability: Durability.DURABILITY_FSYNC_LOCAL,
            duplicate: false,
          })),
        }));
        call.write(
          m.appends.length > 0
            ? { response: undefined, responses: answers }
            : { response: answers[0], responses: [] },
        );
      });
      call.on("end", () => call.end());
    },
  };
  server.addService(JournalServiceService, impl as JournalServiceServer);
  await serveWithHealth(server, d.socket);
  return d;
}

const fingerprint = computeFingerprint({
  provider: "anthropic",
  model: "claude-test",
  systemPrompt: ["coalesce"],
  maxTokens: 16,
  maxIterations: 8,
});

const step = (i: number): Entry => ({
  state: { namespace: "agent", key: "step", type: "text/plain", data: new Uint8Array([97 + i]) },
});

async function burst(batches: boolean, n: number): Promise<{ messages: number[]; seqs: number[]; alone: number[] }> {
  const d = await startStubDaemon(batches);
  const client = await Client.connect({ socket: d.socket, clientName: "ts-coalesce" });
  try {
    const run = await client.start({ runId: "ts-coalesce", fingerprint, prompt: [text("ts")] });
    const w = run.pipelined({ window: 16 });
    // submitted back to back: the first is written at once, the rest queue behind its write
    const pending = await Promise.all(Array.from({ length: n }, (_, i) => w.append(step(i))));
    const seqs = (await Promise.all(pending.map((p) => p.ack))).map((a) => a.seq);
    const before = d.messages.length;
    await (await w.append({ terminal: { reason: "completed" } })).ack; // one append, waited for
    const alone = d.messages.slice(before);
    await w.close();
    await run.close();
    return { messages: d.messages.slice(0, before), seqs, alone };
  } finally {
    client.close();
    d.stop();
  }
}

test("appends queued behind a message being written go in one message and each gets its own acks", async () => {
  const { messages, seqs, alone } = await burst(true, 10);
  assert.equal(messages.reduce((a, b) => a + b, 0), 10);
  assert.ok(messages.length < 10, `appends per message ${messages}: nothing was coalesced`);
  assert.equal(messages[0], 1, "the first append goes alone, at once");
  assert.deepEqual(seqs, Array.from({ length: 10 }, (_, i) => i + 2));
  assert.deepEqual(alone, [1]);
});

test("a daemon whose lease takes no batches gets one append per message", async () => {
  const { messages } = await burst(false, 5);
  assert.deepEqual(messages, [1, 1, 1, 1, 1]);
});

test("stream messages keep a coalesced message under its byte bound", () => {
  const big = Buffer.alloc(Math.floor(COALESCED_MESSAGE_BYTES / 3));
  const appends: AppendRequest[] = Array.from({ length: 7 }, (_, i) =>
    AppendRequest.fromPartial({
      runId: "r",
      leaseId: "l",
      records: [{ seq: i + 2, state: { namespace: "n", key: "k", type: "t", data: big } }],
    }),
  );
  const sizes = streamMessages(appends, true).map((m) => (m.append ? 1 : m.appends.length));
  assert.deepEqual(sizes, [2, 2, 2, 1]); // three thirds of the bound (and framing) do not fit
});
