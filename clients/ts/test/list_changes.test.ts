import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Server } from "@grpc/grpc-js";
import { Client, JournaldError, ListChange, text } from "../src";
import { fingerprint, live, serveWithHealth, socket } from "./live";

/** The next notice, or a failure naming `what` when the stream ends first. */
async function next(it: AsyncIterator<ListChange>, what: string): Promise<ListChange> {
  const r = await it.next();
  assert.ok(!r.done, `${what}: the stream ended`);
  return r.value;
}

/** Read notices until one names `runId` (the test's own timeout bounds the wait). */
async function untilNamed(it: AsyncIterator<ListChange>, runId: string, what: string): Promise<void> {
  for (;;) {
    const n = await next(it, what);
    assert.ok(!n.ready, `${what}: a second ready notice`);
    if (n.all || n.runIds.includes(runId)) return;
  }
}

// Needs a live daemon: JOURNALD_TEST_SOCKET names its socket (tests/integration/client/
// test_polyglot.py sets it). The first notice is ready; a run written and deleted is named;
// aborting the signal ends the iteration without an error.
test(
  "list changes names a run written and deleted and ends on abort",
  { ...live, timeout: 60_000 },
  async () => {
    const client = await Client.connect({ socket, clientName: "ts-list-changes" });
    const stop = new AbortController();
    try {
      const it = client.listChanges({ signal: stop.signal })[Symbol.asyncIterator]();
      const first = await next(it, "the first notice");
      assert.deepEqual(first, { ready: true, runIds: [], all: false });

      const runId = `ts-changes-${process.hrtime.bigint()}`;
      const run = await client.start({ runId, fingerprint, prompt: [text("hi")] });
      await run.appendUser([text("more")]);
      await run.close();
      await untilNamed(it, runId, "the run written");
      assert.equal(await client.delete(runId), true);
      await untilNamed(it, runId, "the run deleted");

      const pending = it.next(); // waiting for a notice when the signal aborts
      stop.abort();
      assert.deepEqual(await pending, { done: true, value: undefined });
    } finally {
      stop.abort();
      client.close();
    }
  },
);

test("list changes from a daemon without the rpc fails typed as unimplemented", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "jd-old")); // a socket path stays short
  const server = new Server(); // health only: every JournalService method is unimplemented
  const sock = path.join(dir, "journald.sock");
  await serveWithHealth(server, sock);
  const client = await Client.connect({ socket: sock, clientName: "ts-old-daemon" });
  try {
    await assert.rejects(
      async () => {
        for await (const n of client.listChanges()) assert.fail(`a notice ${JSON.stringify(n)}`);
      },
      (err: unknown) => err instanceof JournaldError && err.code === "unimplemented",
    );
  } finally {
    client.close();
    server.forceShutdown();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
