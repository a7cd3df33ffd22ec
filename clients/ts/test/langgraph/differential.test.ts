/**
 * One graph (two tool calls at once, an interrupt and its resume, then a second branch
 * forked from the same checkpoint) run through LangGraph's MemorySaver, its SqliteSaver and
 * JournaldSaver on a real daemon: the state histories must be the same, checkpoint for
 * checkpoint, and journald's must read back the same through a new connection.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { BaseMessage } from "@langchain/core/messages";
import { Command, MemorySaver, type StateSnapshot } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import { JournaldSaver } from "../../src/langgraph";
import { Daemon } from "./daemon";
import { buildGraph, type Graph, orphanCalls, question } from "./graph";

let daemon: Daemon;
before(async () => {
  daemon = await new Daemon("file").start();
});
after(async () => {
  await daemon?.stop();
});

const THREAD = "differential-1";
const cfg = { configurable: { thread_id: THREAD } };
/** Above the saver's inline limit, so journald keeps it as an attachment. */
const LONG_DEFINITION = "a sum is what adding gives. ".repeat(400);

function message(m: BaseMessage) {
  const ai = m as BaseMessage & { tool_calls?: { id?: string; name: string; args: unknown }[]; tool_call_id?: string };
  return { type: m.getType(), id: m.id, content: m.content, calls: ai.tool_calls ?? [], answers: ai.tool_call_id };
}

/** A snapshot without what differs by construction between savers: checkpoint ids become
 * their rank among the thread's ids (uuid6 ids sort in creation order), versions are gone. */
function normalized(history: StateSnapshot[]) {
  const ids = history.map((s) => String(s.config.configurable?.checkpoint_id)).sort();
  const rank = (id: unknown) => (id === undefined ? undefined : ids.indexOf(String(id)));
  return history.map((s) => ({
    at: rank(s.config.configurable?.checkpoint_id),
    parent: rank(s.parentConfig?.configurable?.checkpoint_id),
    values: { ...s.values, messages: (s.values.messages ?? []).map(message) },
    next: s.next,
    metadata: s.metadata,
    tasks: s.tasks.map((t) => ({ name: t.name, interrupts: t.interrupts.map((i) => i.value), error: t.error })),
  }));
}

interface Outcome {
  history: ReturnType<typeof normalized>;
  /** The first branch's head, read after the second branch was written. */
  yesAfterBranch: StateSnapshot;
  noHead: StateSnapshot;
}

async function historyOf(graph: Graph): Promise<StateSnapshot[]> {
  const out: StateSnapshot[] = [];
  for await (const s of graph.getStateHistory(cfg)) out.push(s);
  return out;
}

async function drive(saver: BaseCheckpointSaver): Promise<Outcome> {
  const graph = buildGraph(saver, { run: async (c) => (c.name === "add" ? "5" : LONG_DEFINITION) });
  const g = saver instanceof JournaldSaver ? saver.scope(graph) : graph;
  const interrupted = await g.invoke(question(), cfg);
  assert.ok("__interrupt__" in interrupted, "the approval step interrupts");
  await g.invoke(new Command({ resume: "yes" }), cfg);
  const yesHead = await g.getState(cfg);
  const beforeApproval = (await historyOf(g)).find((s) => s.next.includes("approve"));
  assert.ok(beforeApproval, "a checkpoint waits for the approval");
  // a second branch from the same checkpoint, as if the approval had said no: it writes the
  // channel the first branch wrote, at the same step
  await g.updateState(beforeApproval.config, { approved: "no" }, "approve");
  const noHead = await g.getState(cfg);
  const yesAfterBranch = await g.getState(yesHead.config);
  return { history: normalized(await historyOf(g)), yesAfterBranch, noHead };
}

test("MemorySaver, SqliteSaver and JournaldSaver hold the same state history of a branching graph with tools and an interrupt", async () => {
  const memory = await drive(new MemorySaver());
  const sqlite = await drive(SqliteSaver.fromConnString(":memory:"));
  const client = await daemon.connect();
  const saver = new JournaldSaver(client);
  let journald: Outcome;
  try {
    journald = await drive(saver);
  } finally {
    await saver.close();
    client.close();
  }
  // input, agent, tools, agent, approval, then one head per branch
  assert.equal(memory.history.length, 7);
  assert.deepEqual(sqlite.history, memory.history);
  assert.deepEqual(journald.history, memory.history);

  for (const o of [memory, sqlite, journald]) {
    // each branch keeps its own value of the channel both wrote at the same step
    assert.equal(o.yesAfterBranch.values.approved, "yes");
    assert.equal(o.noHead.values.approved, "no");
    assert.deepEqual(orphanCalls(o.noHead.values.messages), []);
  }
});

test("a thread read back from journald on a new connection has the history its writer saw, long values included", async () => {
  const client = await daemon.connect();
  const saver = new JournaldSaver(client);
  try {
    const history = await historyOf(buildGraph(saver));
    const memory = await drive(new MemorySaver());
    assert.deepEqual(normalized(history), memory.history);
    const lookup = history[0].values.messages.find((m: BaseMessage) => m.id === "result-call-lookup-1");
    assert.equal(lookup?.content, LONG_DEFINITION);
  } finally {
    await saver.close();
    client.close();
  }
});

test("what put was given and what getTuple hands out are copies: mutating either changes nothing stored", async () => {
  const client = await daemon.connect();
  const saver = new JournaldSaver(client);
  try {
    const config = { configurable: { thread_id: "copies-1", checkpoint_ns: "" } };
    const messages = ["hello"];
    const checkpoint = {
      v: 4,
      id: "1f1ede00-0000-6000-8000-000000000001",
      ts: new Date(0).toISOString(),
      channel_values: { messages },
      channel_versions: { messages: saver.getNextVersion(undefined) } as Record<string, string | number>,
      versions_seen: {},
    };
    const saved = await saver.put(config, checkpoint, { source: "input", step: -1, parents: {} }, checkpoint.channel_versions);
    messages.push("added after put"); // the loop goes on mutating its own checkpoint
    checkpoint.channel_versions.messages = "mutated";
    const first = await saver.getTuple(saved);
    assert.deepEqual(first?.checkpoint.channel_values, { messages: ["hello"] });
    (first?.checkpoint.channel_values.messages as string[]).push("added by a reader");
    first!.checkpoint.versions_seen.agent = { messages: "seen" };
    const second = await saver.getTuple(saved);
    assert.deepEqual(second?.checkpoint.channel_values, { messages: ["hello"] });
    assert.deepEqual(second?.checkpoint.versions_seen, {});
  } finally {
    await saver.close();
    client.close();
  }
});
