import { test } from "node:test";
import * as assert from "node:assert/strict";
import { Client, computeFingerprint, text } from "../src";

// Needs a live daemon: JOURNALD_TEST_SOCKET names its socket (tests/integration/
// test_polyglot.py sets it). run.close() calls Release before cancelling the stream, so a
// re-open right after never sees `locked`; the self-locked retry is off against a daemon
// that has Release.
const socket = process.env.JOURNALD_TEST_SOCKET;

test(
  "closing a run lets it be reopened at once ten times without locked",
  { skip: socket ? false : "JOURNALD_TEST_SOCKET is not set (needs a running daemon)" },
  async () => {
    const client = await Client.connect({ socket, clientName: "ts-reopen" });
    try {
      const fingerprint = computeFingerprint({
        provider: "anthropic",
        model: "claude-test",
        systemPrompt: ["reopen"],
        maxTokens: 16,
        maxIterations: 4,
      });
      const runId = `ts-reopen-${Date.now()}`;
      await (await client.start({ runId, fingerprint, prompt: [text("hi")] })).close();
      for (let i = 0; i < 10; i++) {
        const run = await client.resume({ runId, fingerprint });
        await run.appendUser([text(`round ${i}`)]);
        await run.close();
        assert.equal(run.ended?.reason, "released", `round ${i}: the lease did not end by Release`);
      }
      const folded = await client.fold(runId);
      assert.equal(folded.state?.lastSeq, 11);
    } finally {
      client.close();
    }
  },
);
