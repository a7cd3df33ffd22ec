import { test } from "node:test";
import * as assert from "node:assert/strict";
import { Client, DEFAULT_MESSAGE_WINDOW, pb, ResponseTooLargeError } from "../src";

// Needs a live daemon and a run longer than the window whose state is over the daemon's max
// message size: JOURNALD_TEST_SOCKET and JOURNALD_TEST_LONG_RUN (tests/integration/
// test_polyglot.py sets them).
const socket = process.env.JOURNALD_TEST_SOCKET;
const runId = process.env.JOURNALD_TEST_LONG_RUN;

/** A whole message list read through the raw History stub, 200 at a time. */
async function pagedRaw(client: Client, view: pb.HistoryView): Promise<pb.Message[]> {
  const out: pb.Message[] = [];
  for (let offset = 0; ; ) {
    const p: pb.HistoryResponse = await client.unary(client.rpc.history, {
      runId: runId ?? "",
      offset,
      limit: 200,
      view,
      atSeq: 0,
      atTime: "",
    });
    out.push(...p.messages);
    if (p.nextOffset >= p.total) return out;
    offset = p.nextOffset;
  }
}

function plain(msgs: pb.Message[]): [string, string][] {
  return msgs.map((m) => [m.role, Buffer.from(m.contentJson).toString("utf8")]);
}

test(
  "fold and resume of a run longer than the window hold every message",
  { skip: socket && runId ? false : "JOURNALD_TEST_SOCKET / JOURNALD_TEST_LONG_RUN are not set" },
  async () => {
    const client = await Client.connect({ socket, clientName: "ts-window" });
    const everything = await Client.connect({ socket, messageWindow: 0 });
    try {
      const want = plain(await pagedRaw(client, pb.HistoryView.HISTORY_VIEW_STATE));
      const wantGoverned = plain(await pagedRaw(client, pb.HistoryView.HISTORY_VIEW_GOVERNED));
      assert.ok(want.length > 2 * DEFAULT_MESSAGE_WINDOW, `${want.length} messages`);
      const folded = await client.fold(runId ?? "", true);
      assert.deepEqual(plain(folded.state?.messages ?? []), want);
      assert.deepEqual(plain(folded.governedMessages), wantGoverned);
      assert.equal(folded.state?.messagesOffset, 0);
      assert.equal(folded.state?.messagesTotal, want.length);
      const fingerprint = folded.state?.fingerprint;
      assert.ok(fingerprint);
      const run = await client.resume({ runId: runId ?? "", fingerprint });
      try {
        assert.deepEqual(plain(run.state?.messages ?? []), want);
        assert.deepEqual(
          run.unanswered().map((c) => c.id),
          ["open"],
        );
      } finally {
        await run.close();
      }
      // window 0 asks for every message at once: over the daemon's cap, a typed error
      await assert.rejects(everything.fold(runId ?? ""), ResponseTooLargeError);
    } finally {
      client.close();
      everything.close();
    }
  },
);
