import { test } from "node:test";
import * as assert from "node:assert/strict";
import { Client, computeFingerprint, LeaseLostError, LockedError, SessionNotFoundError, text } from "../src";

// Needs a live daemon: JOURNALD_TEST_SOCKET names its socket (tests/integration/client/
// test_polyglot.py sets it). Eight runs share one Leases stream: each appends, a refusal of
// one acquire leaves the others held, a closed run is open to anyone at once, and closing the
// set frees every run.
const socket = process.env.JOURNALD_TEST_SOCKET;

test(
  "many runs held over one lease set append, release and reopen at once",
  { skip: socket ? false : "JOURNALD_TEST_SOCKET is not set (needs a running daemon)" },
  async () => {
    const client = await Client.connect({ socket, clientName: "ts-lease-set" });
    try {
      const fingerprint = computeFingerprint({
        provider: "anthropic",
        model: "claude-test",
        systemPrompt: ["lease set"],
        maxTokens: 16,
        maxIterations: 4,
      });
      const base = `ts-set-${Date.now()}`;
      const set = client.leaseSet();
      const runs = await Promise.all(
        Array.from({ length: 8 }, (_, i) => set.start({ runId: `${base}-${i}`, fingerprint, prompt: [text("hi")] })),
      );
      await Promise.all(runs.map((run, i) => run.appendUser([text(`to run ${i}`)])));

      const other = client.leaseSet();
      await assert.rejects(other.resume({ runId: runs[0].id, fingerprint }), LockedError);
      await other.close();
      await assert.rejects(set.resume({ runId: `${base}-missing`, fingerprint }), SessionNotFoundError);
      await runs[1].appendUser([text("still held")]); // a refusal ended no other lease

      await runs[2].close();
      assert.equal(runs[2].ended?.reason, "released");
      await (await client.resume({ runId: runs[2].id, fingerprint })).close();
      assert.equal(set.runs.length, 7);

      await set.close();
      for (const [i, run] of runs.entries()) {
        const again = await client.resume({ runId: run.id, fingerprint });
        assert.equal(again.lastSeq, i === 1 ? 3 : 2, `run ${i}`);
        await again.close();
      }
      await assert.rejects(set.start({ runId: `${base}-late`, fingerprint }), LeaseLostError);
    } finally {
      client.close();
    }
  },
);
