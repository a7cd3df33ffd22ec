import { test } from "node:test";
import * as assert from "node:assert/strict";
import {
  Entry,
  FoldResponse,
  InvalidRecordError,
  InvalidRequestError,
  NotWrittenError,
  Pending,
  SeqGapError,
  text,
  toolUse,
} from "../src";
import { finish, live, startRun, withRun } from "./live";

/** Two tool turns, framework state between them, a final answer and the terminal: 16. */
function sixteenEntries(): Entry[] {
  const out: Entry[] = [];
  const turn = (n: number, name: string) => {
    const ids = Array.from({ length: n }, (_, i) => `toolu_${name}_${i}`);
    out.push({
      assistant: {
        content: ids.map((id, i) => toolUse(id, "lookup", `{"term": "${name} ${i}"}`)),
        stopReason: "tool_use",
        usage: { inputTokens: 10, outputTokens: n },
      },
    });
    ids.forEach((id, i) => out.push({ toolResult: { toolUseId: id, content: [text(`${name} result ${i}`)] } }));
  };
  const bytes = (s: string) => new TextEncoder().encode(s);
  turn(5, "a");
  out.push(
    { state: { namespace: "agent", key: "step", type: "text/plain", data: bytes("one") } },
    { state: { namespace: "agent", key: "notes", type: "text/plain", data: bytes("n") } },
  );
  turn(3, "b");
  out.push(
    { state: { namespace: "agent", key: "step", deleted: true } },
    { state: { namespace: "agent", key: "step", type: "text/plain", data: bytes("two") } },
    { assistant: { content: [text("done")], stopReason: "end_turn" } },
    { terminal: { reason: "completed" } },
  );
  return out;
}

const settled = (p: Promise<unknown>) =>
  Promise.race([p.then(() => true, () => true), new Promise((r) => setImmediate(() => r(false)))]);

test("sixteen pipelined appends are acked in order and fold like unary appends", live, async () => {
  const entries = sixteenEntries();
  assert.equal(entries.length, 16);
  const unary = await startRun("ts-unary");
  const piped = await startRun("ts-piped");
  try {
    for (const e of entries) await unary.run.appendEntry(e);

    const w = piped.run.pipelined({ window: 16 });
    const calls = entries.map((e) => w.append(e)); // all 16 go out before any answer is awaited
    const pending: Pending[] = [];
    for (const c of calls) pending.push(await c);
    assert.deepEqual(
      pending.map((p) => p.seq),
      entries.map((_, i) => i + 2),
    );
    await pending[15].ack;
    for (const [i, p] of pending.entries()) {
      assert.ok(await settled(p.ack), `append ${i} is not settled although the last one is`);
      const ack = await p.ack;
      assert.equal(ack.seq, i + 2);
      assert.equal(ack.duplicate, false);
    }
    await w.close();
    assert.equal(piped.run.lastSeq, 17);
    assert.equal(piped.run.nextIteration, unary.run.nextIteration);
    assert.deepEqual(piped.run.unanswered(), []);

    const want: FoldResponse = await unary.client.fold(unary.run.id, true);
    const got: FoldResponse = await piped.client.fold(piped.run.id, true);
    for (const f of [want, got]) {
      // the run id is in the meta record, so in every hash
      f.state!.runId = "";
      f.state!.lastHash = "";
    }
    assert.deepEqual(got, want);
  } finally {
    await finish(unary);
    await finish(piped);
  }
});

test("an agent waits for its assistant ack, runs tools and streams their results behind it", live, async () => {
  await withRun("ts-agent", async ({ client, run }) => {
    const w = run.pipelined({ window: 16 });
    const ids = ["toolu_x", "toolu_y", "toolu_z"];
    const turn = await w.append({
      assistant: { content: ids.map((id) => toolUse(id, "lookup", `{"term": "${id}"}`)), stopReason: "tool_use" },
    });
    const ack = await turn.ack; // durable before any tool runs
    const stored = await client.load(run.id, ack.seq);
    assert.equal(stored.length, 1);
    assert.ok(stored[0].assistant);
    assert.equal(stored[0].hash, ack.hash);
    assert.equal(run.unanswered().length, 3);
    await assert.rejects(run.appendState("agent", "k", "text/plain", new Uint8Array()), InvalidRequestError);

    // the tools run side by side; each result is streamed as soon as its tool finishes
    const results = await Promise.all(
      ids.map(async (id, i) => {
        await new Promise((r) => setImmediate(r, 3 - i));
        const p = await w.append({ toolResult: { toolUseId: id, content: [text(`found ${id}`)] } });
        return (await p.ack).seq;
      }),
    );
    await w.flush();
    assert.deepEqual([...results].sort(), [3, 4, 5]);
    assert.deepEqual(run.unanswered(), []);
    const final = await w.appendMany([
      { assistant: { content: [text("all found")], stopReason: "end_turn" } },
      { terminal: { reason: "completed" } },
    ]);
    assert.deepEqual(
      (await final.acks).map((a) => a.seq),
      [6, 7],
    );
    await w.close();
    const st = (await client.fold(run.id)).state!;
    assert.equal(st.pending, undefined);
    assert.equal(st.terminal?.reason, "completed");
    assert.equal(st.lastSeq, 7);
    assert.equal(st.nextIteration, 3);
  });
});

test("a refused append fails it and the appends behind it while earlier ones stay stored", live, async () => {
  await withRun("ts-refused", async ({ client, run }) => {
    const w = run.pipelined({ window: 8 });
    const v = new TextEncoder().encode("v");
    // appended in one go: every submission happens before any answer is handled, so the two
    // behind the refused one are in flight when it fails
    const calls = [
      w.append({
        assistant: { content: [toolUse("toolu_1", "lookup", "{}"), toolUse("toolu_2", "lookup", "{}")], stopReason: "tool_use" },
      }),
      w.append({ toolResult: { toolUseId: "toolu_1", content: [text("one")] } }),
      w.append({ state: { namespace: "agent", key: "k", type: "text/plain", data: v } }),
      w.append({ toolResult: { toolUseId: "toolu_unknown", content: [text("?")] } }), // no such call
      w.append({ toolResult: { toolUseId: "toolu_2", content: [text("two")] } }),
      w.append({ state: { namespace: "agent", key: "k", type: "text/plain", data: v } }),
    ];
    const pending = await Promise.all(calls);
    for (const [i, p] of pending.slice(0, 3).entries()) assert.equal((await p.ack).seq, i + 2);
    await assert.rejects(pending[3].ack, InvalidRecordError);
    for (const p of pending.slice(4)) {
      await assert.rejects(p.ack, (err: unknown) => err instanceof NotWrittenError && err.cause instanceof InvalidRecordError);
    }
    // the next append throws the failure, sending nothing; the one after goes on from the
    // last acknowledged seq
    await assert.rejects(w.append({ toolResult: { toolUseId: "toolu_2", content: [] } }), InvalidRecordError);
    assert.equal(run.lastSeq, 4);
    const p = await w.append({ toolResult: { toolUseId: "toolu_2", content: [text("two")] } });
    assert.equal((await p.ack).seq, 5);
    await w.close();
    const stored = await client.load(run.id);
    assert.deepEqual(
      stored.map((r) => r.type.replace("journald.v1.record.", "")),
      ["meta", "assistant", "tool_result", "state", "tool_result"],
    );
    assert.equal(stored[4].toolResult?.toolUseId, "toolu_2");
  });
});

test("append waits while the window is full, then throws the failure it waited behind", live, async () => {
  await withRun("ts-window", async ({ run }) => {
    const w = run.pipelined({ window: 1 });
    // seq 3 while the run is at 1: the daemon waits out its gap wait, then refuses it
    const gap = await w.append({ raw: { seq: 3, user: { contentJson: Buffer.from("[]") } } });
    const behind = w.append({ state: { namespace: "agent", key: "k", type: "text/plain" } });
    assert.equal(await settled(behind), false, "append returned with the window full");
    await assert.rejects(gap.ack, SeqGapError);
    // the waiting append met the failure first: it throws it and sends nothing
    await assert.rejects(behind, SeqGapError);
    await w.flush(); // thrown once: nothing left to report
    const p = await w.append({ state: { namespace: "agent", key: "k", type: "text/plain" } });
    assert.equal((await p.ack).seq, 2);
    await w.close();
  });
});
