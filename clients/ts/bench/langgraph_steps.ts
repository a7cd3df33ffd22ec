/**
 * Graph steps per second of LangGraph.js through JournaldSaver (a real daemon, file backend:
 * an fdatasync per append) beside MemorySaver and SqliteSaver (a file database in the same
 * temporary directory), in one run. The graph is the Python adapter benchmark's: N nodes in a
 * chain, each appending a message to `messages` and bumping a counter; it is invoked on fresh
 * threads through each saver in turn, interleaved run by run, and each invoke's time is
 * reported per step (one node: its writes and its checkpoint, plus, for journald, the thread's
 * lease taken when the run starts and given back when it ends).
 *
 *   npm run build && node dist/bench/langgraph_steps.js [--quick] [--runs 20] [--nodes 10]
 *
 * Prints figures; asserts none. --quick (5 runs) takes a few seconds.
 */
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Annotation, MemorySaver, START, StateGraph } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import { JournaldSaver } from "../src/langgraph";
import { Daemon } from "../test/langgraph/daemon";

const Chain = Annotation.Root({
  messages: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  counter: Annotation<number>({ reducer: (a, b) => a + b, default: () => 0 }),
});

function chain(nodes: number, checkpointer: BaseCheckpointSaver) {
  const g = new StateGraph(Chain) as unknown as {
    addNode(name: string, fn: (s: typeof Chain.State) => Partial<typeof Chain.State>): unknown;
    addEdge(a: string, b: string): unknown;
    compile(o: { checkpointer: BaseCheckpointSaver }): { invoke(i: unknown, c: unknown): Promise<unknown> };
  };
  for (let i = 0; i < nodes; i++) {
    g.addNode(`n${i}`, (s) => ({ messages: [`step ${i}: ${s.counter}`], counter: 1 }));
    g.addEdge(i === 0 ? START : `n${i - 1}`, `n${i}`);
  }
  return g.compile({ checkpointer });
}

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

async function main(): Promise<void> {
  const quick = process.argv.includes("--quick");
  const runs = arg("--runs", quick ? 5 : 20);
  const nodes = arg("--nodes", 10);
  const dir = mkdtempSync(path.join(os.tmpdir(), "lgjs-bench-"));
  const daemon = await new Daemon("file").start();
  const client = await daemon.connect("bench");
  const journald = new JournaldSaver(client, { name: "bench" });
  const sqlite = SqliteSaver.fromConnString(path.join(dir, "checkpoints.db"));
  const savers: [string, BaseCheckpointSaver, (g: ReturnType<typeof chain>) => ReturnType<typeof chain>][] = [
    ["JournaldSaver", journald, (g) => journald.scope(g)],
    ["SqliteSaver (file)", sqlite, (g) => g],
    ["MemorySaver", new MemorySaver(), (g) => g],
  ];
  const graphs = savers.map(([name, saver, wrap]) => ({ name, graph: wrap(chain(nodes, saver)), perStepMs: [] as number[] }));
  try {
    for (const g of graphs) await g.graph.invoke({}, { configurable: { thread_id: `warm-${g.name}` } });
    for (let run = 0; run < runs; run++) {
      for (const g of graphs) {
        const t0 = process.hrtime.bigint();
        await g.graph.invoke({}, { configurable: { thread_id: `bench-${run}-${process.pid}` } });
        g.perStepMs.push(Number(process.hrtime.bigint() - t0) / 1e6 / nodes);
      }
    }
  } finally {
    await journald.close();
    client.close();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`LangGraph.js graph steps: ${runs} runs of a ${nodes}-node chain per saver, node ${process.version}`);
  console.log("| saver | steps/s | p50 ms/step | p99 ms/step |");
  console.log("|---|---:|---:|---:|");
  const p50 = new Map<string, number>();
  for (const g of graphs) {
    const sorted = [...g.perStepMs].sort((a, b) => a - b);
    const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
    p50.set(g.name, quantile(sorted, 0.5));
    console.log(`| ${g.name} | ${Math.round(1000 / mean).toLocaleString("en")} | ${quantile(sorted, 0.5).toFixed(2)} | ${quantile(sorted, 0.99).toFixed(2)} |`);
  }
  const j = p50.get("JournaldSaver") ?? NaN;
  console.log(`p50 ratio JournaldSaver / SqliteSaver (file): ${(j / (p50.get("SqliteSaver (file)") ?? NaN)).toFixed(2)}x`);
  console.log(`p50 ratio JournaldSaver / MemorySaver: ${(j / (p50.get("MemorySaver") ?? NaN)).toFixed(2)}x`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
