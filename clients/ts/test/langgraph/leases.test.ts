/**
 * The lease rules of JournaldSaver against a real daemon: a graph run holds its thread from
 * the moment LangGraph's loop loads it until the invoke ends; a second driver is refused
 * before any of its nodes runs; reads never take the lease.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Command } from "@langchain/langgraph";
import { LockedError, SeqConflictError } from "../../src";
import { JournaldSaver } from "../../src/langgraph";
import { Daemon } from "./daemon";
import { buildGraph, type ToolCall, question } from "./graph";

let daemon: Daemon;
before(async () => {
  daemon = await new Daemon("file").start();
});
after(async () => {
  await daemon?.stop();
});

async function saver(name: string): Promise<JournaldSaver> {
  return JournaldSaver.connect({ socket: daemon.socket, name });
}

/** Retry `check` until it passes (a bound on a condition, not a timing assertion). */
export async function eventually(check: () => Promise<void>, timeoutMs = 60_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

test("a second driver is refused locked before any node runs while an invoke holds the thread, and drives it once that invoke returns", async () => {
  const a = await saver("driver-a");
  const b = await saver("driver-b");
  try {
    const cfg = { configurable: { thread_id: "lease-scoped" } };
    const lookupStarted = gate();
    const lookupMayEnd = gate();
    const graphA = a.scope(
      buildGraph(a, {
        started: (c: ToolCall) => c.name === "lookup" && lookupStarted.open(),
        run: async (c: ToolCall) => {
          if (c.name === "lookup") await lookupMayEnd.wait;
          return "ok";
        },
      }),
    );
    const startedByB: string[] = [];
    const graphB = b.scope(buildGraph(b, { started: (c: ToolCall) => startedByB.push(c.id) }));

    const running = graphA.invoke(question(), cfg);
    await lookupStarted.wait;
    await assert.rejects(graphB.invoke(question(2), cfg), (err: unknown) => {
      assert.ok(err instanceof LockedError, String(err));
      assert.match(err.message, /being run by pid \d+ \(driver-a\)/);
      assert.equal(err.metadata.thread_id, "lease-scoped");
      return true;
    });
    assert.deepEqual(startedByB, [], "the refused driver ran no tool");
    // reads never take the lease: B sees A's checkpoints as they become durable (LangGraph
    // saves a step's checkpoint in the background while its tasks run)
    await eventually(async () => {
      const seen = await graphB.getState(cfg);
      assert.deepEqual(seen.values.messages.find((m: { id?: string }) => m.id === "ai-1-calls")?.tool_calls?.map((c: { id?: string }) => c.id), [
        "call-add-1",
        "call-lookup-1",
      ]);
      assert.ok(seen.next.includes("tool"));
    });

    lookupMayEnd.open();
    await running; // interrupted at the approval step: the invoke ended, so did its lease
    const done = await graphB.invoke(new Command({ resume: "yes" }), cfg);
    assert.equal(done.approved, "yes");
    assert.deepEqual(startedByB, [], "B resumed at the approval step, it re-ran no tool");
  } finally {
    await a.close();
    await b.close();
  }
});

test("a graph run outside scope keeps its lease until release, and updateState holds the lease for its write only", async () => {
  const a = await saver("holder-a");
  const b = await saver("holder-b");
  try {
    const cfg = { configurable: { thread_id: "lease-pinned" } };
    const graphA = buildGraph(a); // not scoped: LangGraph.js tells the saver nothing at the end
    const graphB = b.scope(buildGraph(b));
    await graphA.invoke(question(), cfg);
    await assert.rejects(graphB.invoke(new Command({ resume: "yes" }), cfg), LockedError);
    await a.release("lease-pinned");

    await graphA.updateState(cfg, { approved: "edited" });
    // the write outside a graph run gave the lease back at once
    const done = await graphB.invoke(new Command({ resume: "yes" }), cfg);
    assert.equal(done.approved, "yes");
    const history = [];
    for await (const s of graphA.getStateHistory(cfg)) history.push(s.values.approved);
    assert.deepEqual(history.slice(0, 3), ["yes", "edited", undefined]);
  } finally {
    await a.close();
    await b.close();
  }
});

/**
 * A's graph run pauses in a tool while the daemon restarts (ending A's lease) and B runs the
 * thread on; then A's run writes. With `unseen`, A's process has not yet noticed its Open
 * stream close when it writes (on a loaded machine that news can come late), so the daemon
 * answers lease_lost to an append under the old lease.
 */
async function leaseEndedMidRun(threadId: string, unseen: boolean): Promise<void> {
  const a = await saver(`${threadId}-a`);
  try {
    const cfg = { configurable: { thread_id: threadId } };
    const lookupStarted = gate();
    const lookupMayEnd = gate();
    const graphA = a.scope(
      buildGraph(a, {
        started: (c: ToolCall) => c.name === "lookup" && lookupStarted.open(),
        run: async (c: ToolCall) => {
          if (c.name !== "lookup") return "5";
          await lookupMayEnd.wait;
          return "a late lookup";
        },
      }),
    );
    const running = graphA.invoke(question(), cfg);
    await lookupStarted.wait;
    const reader = buildGraph(a);
    await eventually(async () => assert.ok((await reader.getState(cfg)).values.messages?.some((m: { id?: string }) => m.id === "ai-1-calls")));
    // the add call (which does not wait) has its result written before the daemon stops: a
    // write in flight at the restart would be A writing after its lease ended, another test
    await eventually(async () => {
      const tuple = await a.getTuple(cfg);
      assert.ok(tuple?.pendingWrites?.some((w) => JSON.stringify(w[2]).includes("call-add-1")));
    });
    if (unseen) {
      const held = (a as unknown as { held: Map<string, { run: object }> }).held;
      const run = [...held.values()][0]?.run;
      assert.ok(run, "A holds the thread's lease while its tool runs");
      Object.defineProperty(run, "ended", { get: () => undefined });
    }
    await daemon.restart(); // A's lease ends with the daemon that granted it
    const b = await saver(`${threadId}-b`);
    try {
      const interrupted = await b.scope(buildGraph(b)).invoke(null, cfg);
      assert.ok("__interrupt__" in interrupted, "B ran the thread on to its approval step");
    } finally {
      await b.close();
    }
    // the thread as the daemon holds it: A's own reads would answer from the lease A has not
    // yet seen end (with `unseen`), which is A's view, not the thread's
    const c = await saver(`${threadId}-reader`);
    try {
      const daemonView = buildGraph(c);
      const before = await daemonView.getState(cfg);
      lookupMayEnd.open();
      await assert.rejects(running, SeqConflictError);
      const after = await daemonView.getState(cfg);
      assert.deepEqual(after.values, before.values, "A wrote nothing over B's thread");
      assert.ok(!JSON.stringify(after.values).includes("a late lookup"));
    } finally {
      await c.close();
    }
  } finally {
    await a.close();
  }
}

test("a graph run whose lease the daemon ended mid-run fails its next write when another driver moved the thread on, and writes nothing", async () => {
  await leaseEndedMidRun("lease-lost", false);
});

test("a graph run that writes before it has seen the daemon end its lease fails as a conflict too, and writes nothing", async () => {
  await leaseEndedMidRun("lease-lost-unseen", true);
});
