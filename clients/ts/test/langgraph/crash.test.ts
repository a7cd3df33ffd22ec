/**
 * A node process running the test graph on JournaldSaver is killed with SIGKILL while one of
 * its two tools is still running; a new process resumes the thread from journald. Every put
 * and putWrites the dead process saw resolve is still there, the tool that had finished is
 * not run again, the graph completes (its scripted model refuses, as a model API does, a
 * history with an unanswered tool call), and every tool call in the messages is answered.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import * as path from "node:path";
import { after, before, test } from "node:test";
import type { BaseMessage } from "@langchain/core/messages";
import { LockedError } from "../../src";
import { JournaldSaver } from "../../src/langgraph";
import { childEnv, Daemon } from "./daemon";
import { buildGraph, orphanCalls, question } from "./graph";

const AGENT = path.join(__dirname, "crash_agent.js");
const LINE_TIMEOUT_MS = 60_000;

let daemon: Daemon;
before(async () => {
  daemon = await new Daemon("file").start();
});
after(async () => {
  await daemon?.stop();
});

class Agent {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  private stderr = "";
  readonly exited: Promise<number | null>;

  constructor(mode: string, thread: string) {
    this.proc = spawn(process.execPath, [AGENT, mode, thread], { env: childEnv(daemon), stdio: ["ignore", "pipe", "pipe"] });
    let buffered = "";
    this.proc.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      const parts = buffered.split("\n");
      buffered = parts.pop() ?? "";
      this.lines.push(...parts);
    });
    this.proc.stderr?.on("data", (chunk: Buffer) => (this.stderr += chunk.toString()));
    this.exited = new Promise((resolve) => this.proc.once("exit", (code) => resolve(code)));
  }

  /** Wait until a line passes `match` (a bound on a condition, failing with the output). */
  async waitFor(match: (line: string) => boolean, what: string): Promise<string> {
    const until = Date.now() + LINE_TIMEOUT_MS;
    for (;;) {
      const found = this.lines.find(match);
      if (found !== undefined) return found;
      if (this.proc.exitCode !== null || Date.now() > until) {
        throw new Error(`no ${what} from the agent (exit ${this.proc.exitCode}):\n${this.lines.join("\n")}\n${this.stderr}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  kill9(): Promise<number | null> {
    const running = this.proc.exitCode === null && this.proc.signalCode === null;
    if (running && this.proc.pid !== undefined) process.kill(this.proc.pid, "SIGKILL");
    return this.exited;
  }

  get output(): string {
    return `${this.lines.join("\n")}\n${this.stderr}`;
  }
}

const field = (prefix: string, lines: string[]) => lines.filter((l) => l.startsWith(prefix)).map((l) => l.split(" "));

test("a graph killed -9 mid-tool resumes in a new process from journald with nothing acknowledged lost and no orphan tool call", async () => {
  const thread = `crash-${process.pid}`;
  const first = new Agent("first", thread);
  let second: Agent | undefined;
  try {
    await first.waitFor((l) => l === "tool-started call-lookup-1", "lookup start");
    // the input's writes and then the add tool's: a message and the edge back to the agent
    const toAgent = (l: string) => l.startsWith("acked-writes ") && l.endsWith(" messages,branch:to:agent");
    await first.waitFor(() => first.lines.filter(toAgent).length === 2, "the add tool's acknowledged write");

    // while it runs, the thread is the first process's: a driver here is refused before any node
    const client = await daemon.connect();
    const saver = new JournaldSaver(client);
    const startedHere: string[] = [];
    try {
      const graph = saver.scope(buildGraph(saver, { started: (c) => startedHere.push(c.id) }));
      await assert.rejects(graph.invoke(question(), { configurable: { thread_id: thread } }), (err: unknown) => {
        assert.ok(err instanceof LockedError, String(err));
        assert.equal(err.metadata.holder_pid, String(first.proc.pid));
        return true;
      });
      assert.deepEqual(startedHere, []);
    } finally {
      await saver.close();
      client.close();
    }

    const acked = [...first.lines];
    await first.kill9();
    assert.equal(first.proc.signalCode, "SIGKILL", "the first agent died by SIGKILL");

    second = new Agent("resume", thread);
    const final = await second.waitFor((l) => l.startsWith("final "), "final state");
    assert.equal(await second.exited, 0, second.output);
    const state = JSON.parse(final.slice("final ".length)) as { approved: string; messages: { id: string }[] };
    assert.equal(state.approved, "yes");
    // only the tool the crash interrupted ran again: the add result was acknowledged before it
    assert.deepEqual(field("tool-started", second.lines).map((f) => f[1]), ["call-lookup-1"]);

    const reader = await daemon.connect();
    const check = new JournaldSaver(reader);
    try {
      const cfg = { configurable: { thread_id: thread } };
      const graph = buildGraph(check);
      const saved = new Set<string>();
      for await (const s of graph.getStateHistory(cfg)) saved.add(String(s.config.configurable?.checkpoint_id));
      for (const [, id] of field("acked-put", acked)) assert.ok(saved.has(id), `acknowledged checkpoint ${id} is kept`);
      const messages = (await graph.getState(cfg)).values.messages as BaseMessage[];
      assert.deepEqual(orphanCalls(messages), []);
      assert.deepEqual(
        messages.map((m) => m.id),
        ["human-1", "ai-1-calls", "result-call-add-1", "result-call-lookup-1", "ai-1-answer"],
      );
    } finally {
      await check.close();
      reader.close();
    }
  } finally {
    await first.kill9();
    await second?.kill9();
  }
});
