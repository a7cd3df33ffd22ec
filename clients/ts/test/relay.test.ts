import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  credentials,
  sendUnaryData,
  Server,
  ServerDuplexStream,
  ServerUnaryCall,
  ServerWritableStream,
  status as Status,
} from "@grpc/grpc-js";
import { Client, target } from "../src";
import {
  AppendStreamRequest,
  AppendStreamResponse,
  JournalServiceClient,
  JournalServiceServer,
  JournalServiceService,
  OpenRequest,
  OpenResponse,
  ReleaseRequest,
  ReleaseResponse,
} from "../src/gen/journald/v1/journal";

import { finish, live, serveWithHealth, socket, Started, startRun } from "./live";

interface Relay {
  socket: string;
  cut: boolean;
  streams: number;
  stop(): void;
}

/**
 * Pass a writer's calls through to the real daemon on a unix socket of its own, and cut the
 * first AppendStream once the daemon has answered `cutAt` appends on it (in however many
 * messages), without passing the last answer message on: an ack lost after the daemon stored the records, which the client sees as a
 * bare `cutCode` without journald's trailer (UNAVAILABLE: a broken connection; INTERNAL: a
 * stream reset, "Internal error from Core").
 */
async function startRelay(daemonSocket: string, cutAt: number, cutCode: number = Status.UNAVAILABLE): Promise<Relay> {
  const up = new JournalServiceClient(target(daemonSocket), credentials.createInsecure());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "jd-relay")); // a socket path stays short
  const server = new Server();
  const relay: Relay = {
    socket: path.join(dir, "relay.sock"),
    cut: false,
    streams: 0,
    stop: () => {
      server.forceShutdown();
      up.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  const impl: Partial<JournalServiceServer> = {
    open: (call: ServerWritableStream<OpenRequest, OpenResponse>) => {
      const u = up.open(call.request);
      u.on("data", (m: OpenResponse) => call.write(m));
      u.on("error", (err) => call.emit("error", err));
      u.on("end", () => call.end());
      call.on("cancelled", () => u.cancel());
    },
    release: (call: ServerUnaryCall<ReleaseRequest, ReleaseResponse>, done: sendUnaryData<ReleaseResponse>) => {
      up.release(call.request, done);
    },
    appendStream: (call: ServerDuplexStream<AppendStreamRequest, AppendStreamResponse>) => {
      relay.streams++;
      const u = up.appendStream();
      let answered = 0;
      let dead = false;
      call.on("data", (m: AppendStreamRequest) => u.write(m));
      call.on("end", () => u.end());
      call.on("cancelled", () => u.cancel());
      u.on("data", (m: AppendStreamResponse) => {
        if (dead) return;
        answered += Math.max(1, m.responses.length); // a coalesced message answers several
        if (answered >= cutAt && !relay.cut) {
          relay.cut = dead = true;
          u.cancel();
          call.emit("error", { code: cutCode, details: "relay: connection cut" });
          return;
        }
        call.write(m);
      });
      u.on("error", (err) => dead || call.emit("error", err));
      u.on("end", () => dead || call.end());
    },
  };
  server.addService(JournalServiceService, impl as JournalServiceServer);
  await serveWithHealth(server, relay.socket);
  return relay;
}

for (const [name, code] of [
  ["", Status.UNAVAILABLE],
  [" by a bare INTERNAL", Status.INTERNAL],
] as const) {
  test(`a stream cut${name} after the daemon stored an append is resent and every record is stored once`, live, () =>
    cutStreamIsResentAndStoredOnce(code),
  );
}

async function cutStreamIsResentAndStoredOnce(code: number): Promise<void> {
  const relay = await startRelay(socket!, 3, code);
  const direct = await Client.connect({ socket });
  let c: Started | undefined;
  try {
    c = await startRun("ts-cut", relay.socket);
    const w = c.run.pipelined({ window: 8 });
    const values = "abcdefgh".split("");
    const pending = await Promise.all(
      values.map((v) => w.append({ state: { namespace: "agent", key: "step", type: "text/plain", data: Buffer.from(v) } })),
    );
    const acks = await Promise.all(pending.map((p) => p.ack));
    assert.deepEqual(
      acks.map((a) => a.seq),
      [2, 3, 4, 5, 6, 7, 8, 9],
    );
    // seq 4's answer was the one cut off: the daemon had stored it, so the resend is a duplicate
    assert.equal(acks[2].duplicate, true);
    await w.close();
    assert.equal(relay.cut, true);
    assert.equal(relay.streams, 2);
    const stored = await direct.load(c.run.id);
    assert.deepEqual(
      stored.map((r) => [r.seq, Buffer.from(r.state?.data ?? []).toString()]),
      [[1, ""], ...values.map((v, i) => [i + 2, v])],
    );
  } finally {
    if (c) await finish(c);
    direct.close();
    relay.stop();
  }
}
