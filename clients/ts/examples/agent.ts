/**
 * The TypeScript side of the cross-language end-to-end test
 * (tests/integration/client/test_polyglot.py), and a small demo of the client.
 *
 *   node dist/examples/agent.js --socket S --run R resume
 *       resume R (written by the Go agent, which was killed with SIGKILL), print the
 *       unanswered calls, complete them through a tool function, journal the final
 *       assistant turn and the terminal record; print one JSON summary line
 *   node dist/examples/agent.js --socket S --run R errors
 *       reach locked, fingerprint_drift and invalid_record against the daemon; print one
 *       JSON line per error
 *
 * Timestamps come from a fixed clock (one second per stamp from --t0), so the journal is
 * byte-identical run after run.
 */
import { parseArgs } from "node:util";
import { context, trace, TraceFlags } from "@opentelemetry/api";
import {
  Client,
  computeFingerprint,
  FingerprintDriftError,
  InvalidRecordError,
  JournaldError,
  LockedError,
  text,
  ToolCall,
} from "../src";

/** The agent configuration every language in the polyglot test shares. */
export const config = {
  provider: "anthropic",
  model: "claude-test-1",
  systemPrompt: ["You are a careful research agent.", "Answer with sources: <cite>, & never guess."],
  tools: [
    {
      name: "get_weather",
      description: "Weather for a city (°C)",
      input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
    {
      name: "lookup",
      description: "Look a term up",
      input_schema: { type: "object", properties: { term: { type: "string" } }, required: ["term"] },
    },
  ],
  thinking: "off",
  maxTokens: 4096,
  maxIterations: 8,
};

function fixedClock(t0: string): () => Date {
  let next = Date.parse(t0);
  return () => {
    const now = new Date(next);
    next += 1000;
    return now;
  };
}

async function getWeather(call: ToolCall): Promise<string> {
  const { city } = JSON.parse(call.inputJson) as { city: string };
  return `${city}: 9 °C, föhn wind`;
}

/** The polyglot agents share one W3C trace; this agent writes under its own span. */
const otelContext = trace.setSpanContext(context.active(), {
  traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "53995c3f42cd8ad8",
  traceFlags: TraceFlags.SAMPLED,
});

async function resume(client: Client, runId: string): Promise<void> {
  const opts = { otelContext };
  const run = await client.resume({ runId, fingerprint: computeFingerprint(config), ...opts });
  try {
    const unanswered = run.unanswered().map((c) => c.id);
    const warnings = run.warnings.map((w) => w.code);
    const acks = await run.completePending(async (call) => {
      if (call.name !== "get_weather") throw new Error(`unknown tool ${call.name}`);
      return getWeather(call);
    }, opts);
    await run.appendAssistant({
      content: [text("Paris is 14 °C with light rain; Zürich is 9 °C under föhn, a warm dry wind.")],
      stopReason: "end_turn",
      usage: { inputTokens: 300, outputTokens: 60, cacheReadTokens: 250 },
    }, opts);
    const terminal = await run.appendTerminal("completed", "answered", opts);
    console.log(
      JSON.stringify({
        unanswered,
        warnings,
        completed: acks.map((a) => a.seq),
        lastSeq: terminal.seq,
        lastHash: terminal.hash,
      }),
    );
  } finally {
    await run.close();
  }
}

function report(name: string, err: unknown, cls: new (...a: never[]) => JournaldError): void {
  const e = err instanceof JournaldError ? err : undefined;
  console.log(
    JSON.stringify({
      case: name,
      code: e?.code ?? "",
      typed: err instanceof cls,
      class: e?.name ?? String(err),
      message: e?.message ?? String(err),
      diff: e?.diff ?? [],
      metadata: e?.metadata ?? {},
    }),
  );
}

async function reachErrors(client: Client, runId: string): Promise<void> {
  const fingerprint = computeFingerprint(config);
  const holder = await client.start({ runId, fingerprint, prompt: [text("errors")] });
  // locked: a second writer while the first holds the lease.
  await client.resume({ runId, fingerprint }).then(
    (r) => r.close().then(() => report("locked", undefined, LockedError)),
    (err) => report("locked", err, LockedError),
  );
  // invalid_record: a record with no payload is refused, nothing written.
  await holder.appendRaw({}).then(
    () => report("invalid_record", undefined, InvalidRecordError),
    (err) => report("invalid_record", err, InvalidRecordError),
  );
  await holder.close();
  // fingerprint_drift: resume with another model and system prompt.
  // Right after close() the daemon may not have seen the cancel yet: the client retries
  // a `locked` that names this process itself, so this gets the drift error, not locked.
  const drifted = computeFingerprint({ ...config, model: "claude-test-2", systemPrompt: ["You are somebody else."] });
  await client.resume({ runId, fingerprint: drifted }).then(
    (r) => r.close().then(() => report("fingerprint_drift", undefined, FingerprintDriftError)),
    (err) => report("fingerprint_drift", err, FingerprintDriftError),
  );
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      socket: { type: "string" },
      run: { type: "string", default: "polyglot-1" },
      t0: { type: "string", default: "2026-11-30T12:01:00Z" },
    },
  });
  const client = await Client.connect({
    socket: values.socket,
    clock: fixedClock(values.t0 as string),
    clientName: "ts-agent",
  });
  try {
    if (positionals[0] === "resume") await resume(client, values.run as string);
    else if (positionals[0] === "errors") await reachErrors(client, values.run as string);
    else throw new Error("usage: agent [--socket S] [--run R] resume|errors");
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error("agent:", err instanceof Error ? err.stack : err);
  process.exit(1);
});
