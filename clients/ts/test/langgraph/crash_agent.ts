/**
 * The agent process of crash.test.ts: runs the test graph on JournaldSaver against the
 * daemon at $JOURNALD_SOCKET and prints one line per fact the test checks:
 *
 *   acked-put <checkpoint_id>          a put resolved (the checkpoint is durable)
 *   acked-writes <task_id> <channels>  a putWrites resolved
 *   tool-started <call_id>             a tool began
 *   final <state json>                 the graph ended (resume mode)
 *
 * `node crash_agent.js first <thread>` asks the question; its `lookup` tool never returns,
 * so the test kills it there. `node crash_agent.js resume <thread>` continues the thread
 * from journald and approves. Without arguments (node --test loads every file under
 * test/) it does nothing.
 */
import type { RunnableConfig } from "@langchain/core/runnables";
import { Command } from "@langchain/langgraph";
import type { Checkpoint, CheckpointMetadata, ChannelVersions, PendingWrite } from "@langchain/langgraph-checkpoint";
import { Client } from "../../src";
import { JournaldSaver } from "../../src/langgraph";
import { buildGraph, question, type ToolCall } from "./graph";

class ReportingSaver extends JournaldSaver {
  override async put(config: RunnableConfig, cp: Checkpoint, md: CheckpointMetadata, v: ChannelVersions) {
    const out = await super.put(config, cp, md, v);
    console.log(`acked-put ${cp.id}`);
    return out;
  }

  override async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string) {
    await super.putWrites(config, writes, taskId, taskPath);
    console.log(`acked-writes ${taskId} ${writes.map(([channel]) => channel).join(",")}`);
  }
}

async function main(mode: string, threadId: string): Promise<void> {
  const client = await Client.connect({ clientName: `crash-agent-${mode}` });
  const saver = new ReportingSaver(client, { name: `crash-agent-${mode}` });
  const graph = saver.scope(
    buildGraph(saver, {
      started: (c: ToolCall) => console.log(`tool-started ${c.id}`),
      run: async (c: ToolCall) => {
        if (c.name === "lookup" && mode === "first") await new Promise(() => setInterval(() => undefined, 1000));
        return c.name === "add" ? "5" : "definition of sum";
      },
    }),
  );
  const cfg = { configurable: { thread_id: threadId } };
  if (mode === "first") {
    await graph.invoke(question(), cfg);
    throw new Error("the first run was meant to hang in its lookup tool");
  }
  const interrupted = await graph.invoke(null, cfg);
  if (!("__interrupt__" in interrupted)) throw new Error("the resumed run did not reach the approval step");
  const done = await graph.invoke(new Command({ resume: "yes" }), cfg);
  console.log(`final ${JSON.stringify(done)}`);
  await saver.close();
  client.close();
}

if (require.main === module && process.argv.length >= 4) {
  main(process.argv[2], process.argv[3]).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
