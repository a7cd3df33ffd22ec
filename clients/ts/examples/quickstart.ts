/**
 * The README example: start a run, journal one tool call, crash, resume, finish.
 *
 *   journald serve &                               # the daemon (default socket)
 *   node dist/examples/quickstart.js start         # journals the call, dies with SIGKILL
 *   node dist/examples/quickstart.js resume        # runs the unanswered call, finishes
 */
import { Client, computeFingerprint, text, toolUse } from "../src";

// The agent's configuration. Only its hashes reach the daemon.
const fingerprint = computeFingerprint({
  provider: "anthropic",
  model: "claude-sonnet-4-5",
  systemPrompt: ["You are a helpful assistant."],
  tools: [{ name: "add", description: "Add two integers", input_schema: { type: "object" } }],
  maxTokens: 1024,
  maxIterations: 10,
});

async function main(): Promise<void> {
  const [command, runId = "quickstart"] = process.argv.slice(2);
  // Socket: $JOURNALD_SOCKET, else $XDG_RUNTIME_DIR/journald/journald.sock, else
  // ${TMPDIR:-/tmp}/journald-<uid>/journald.sock; or pass { socket: "/path" }.
  const client = await Client.connect({ clientName: "quickstart" });

  if (command === "start") {
    const run = await client.start({ runId, fingerprint, prompt: [text("What is 2 + 3?")] });
    // The model asked for a tool: journal its turn before running anything.
    await run.appendAssistant({
      content: [toolUse("toolu_1", "add", '{"a": 2, "b": 3}')],
      stopReason: "tool_use",
      usage: { inputTokens: 25, outputTokens: 12 },
    });
    console.log(`journaled seq ${run.lastSeq}; crashing before the tool runs`);
    // A real crash: no close(). The daemon releases the lease at once.
    process.kill(process.pid, "SIGKILL");
  } else if (command === "resume") {
    // Typed errors: LockedError, FingerprintDriftError (err.diff), CompletedError, ...
    const run = await client.resume({ runId, fingerprint });
    for (const w of run.warnings) console.log(`warning ${w.code}: ${w.message}`);
    // Only the calls the crash left unanswered run again.
    await run.completePending(async (call) => {
      console.log(`running ${call.name}(${call.inputJson})`);
      return "5";
    });
    await run.appendAssistant({ content: [text("2 + 3 = 5")], stopReason: "end_turn" });
    await run.appendTerminal("completed");
    const { state } = await run.fold();
    console.log(`done: ${state?.messages.length} messages, ${state?.lastSeq} records, last hash ${state?.lastHash}`);
    await run.close();
    client.close();
  } else {
    throw new Error("usage: quickstart start|resume [RUN_ID]");
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
