/**
 * What a writer journals: the record kinds as plain objects (`Entry`), and how one becomes
 * a record. The Run's append methods write one entry per call; a PipelinedWriter keeps
 * several in flight on one stream.
 */
import { canonical } from "./canonical";
import { Record as JournalRecord, ToolCall } from "./gen/journald/v1/journal";

/** One content block, e.g. {type: "text", text: "hi"}. */
export type Block = { [key: string]: unknown };

/** A text block. */
export const text = (t: string): Block => ({ type: "text", text: t });

/** A tool_use block; inputJson is the raw JSON text the model produced. */
export const toolUse = (id: string, name: string, inputJson: string): Block => ({
  type: "tool_use",
  id,
  name,
  input: inputJson,
});

export interface Usage {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadTokens?: number;
  cacheCreationTokens?: number;
}

export interface AssistantTurn {
  content: Block[];
  /** 1-based; default: the run's next iteration. */
  iteration?: number;
  stopReason: string;
  usage?: Usage;
}

export interface ToolResultInput {
  toolUseId: string;
  content: Block[];
  isError?: boolean;
  remote?: boolean;
  /**
   * Store `content` as an attachment of the run first (one text block as its UTF-8 text,
   * anything else as the canonical JSON of the blocks) and journal the result as that
   * attachment's block, so output larger than --max-record-bytes (up to the 8 MiB
   * attachment limit) stays out of the record. Honoured by `Run.appendToolResult`
   * (docs/protocol.md#large-tool-results).
   */
  asAttachment?: boolean;
}

/** Media types of a tool result stored as an attachment. */
export const RESULT_TEXT_TYPE = "text/plain; charset=utf-8";
export const RESULT_BLOCKS_TYPE = "application/json";

/** A tool result's content as attachment bytes and their media type. */
export function resultAttachmentBytes(content: Block[]): { data: Buffer; mediaType: string } {
  const only = content.length === 1 ? content[0] : undefined;
  if (only && Object.keys(only).length === 2 && only.type === "text" && typeof only.text === "string") {
    return { data: Buffer.from(only.text, "utf8"), mediaType: RESULT_TEXT_TYPE };
  }
  return { data: canonical(content), mediaType: RESULT_BLOCKS_TYPE };
}

/**
 * One value of framework state under (namespace, key), or with `deleted` its removal (an
 * empty key removes every key of the namespace).
 */
export interface StateInput {
  namespace: string;
  key?: string;
  type?: string;
  data?: Uint8Array;
  deleted?: boolean;
}

/**
 * One record to journal, by kind: `{ assistant }`, `{ toolResult }`, `{ user }` (the new
 * blocks of an interactive follow-up), `{ terminal }`, `{ state }` or `{ raw }` (a record
 * built by the caller: seq and ts are filled when unset; it leaves the run's iteration and
 * unanswered calls as they are).
 */
export type Entry =
  | { assistant: AssistantTurn }
  | { toolResult: ToolResultInput }
  | { user: Block[] }
  | { terminal: { reason: string; message?: string } }
  | { state: StateInput }
  | { raw: Partial<JournalRecord> };

/** @internal An entry as a record's payload, plus what its ack changes in the Run's view. */
export interface Built {
  payload: Partial<JournalRecord>;
  /** An assistant turn: its iteration is done and its calls become the unanswered ones. */
  assistant?: { iteration: number; calls: ToolCall[] };
  /** The tool call a tool result closes. */
  answers?: string;
}

/** @internal Turn an entry into its record; nextIteration numbers an unnumbered turn. */
export function buildEntry(e: Entry, nextIteration: number): Built {
  if ("assistant" in e) {
    const turn = e.assistant;
    const iteration = turn.iteration ?? nextIteration;
    const calls: ToolCall[] = turn.content
      .filter((b) => b.type === "tool_use")
      .map((b) => ({
        id: String(b.id ?? ""),
        name: String(b.name ?? ""),
        inputJson: typeof b.input === "string" ? b.input : JSON.stringify(b.input ?? null),
      }));
    const usage = {
      inputTokens: turn.usage?.inputTokens ?? 0,
      outputTokens: turn.usage?.outputTokens ?? 0,
      cacheReadTokens: turn.usage?.cacheReadTokens ?? 0,
      cacheCreationTokens: turn.usage?.cacheCreationTokens ?? 0,
    };
    const message = { role: "assistant", contentJson: canonical(turn.content) };
    return {
      payload: { assistant: { message, iteration, stopReason: turn.stopReason, usage } },
      assistant: { iteration, calls },
    };
  }
  if ("toolResult" in e) {
    const r = e.toolResult;
    const toolResult = {
      toolUseId: r.toolUseId,
      contentJson: canonical(r.content),
      isError: r.isError ?? false,
      remote: r.remote ?? false,
    };
    return { payload: { toolResult }, answers: r.toolUseId };
  }
  if ("user" in e) return { payload: { user: { contentJson: canonical(e.user) } } };
  if ("terminal" in e) {
    return { payload: { terminal: { reason: e.terminal.reason, message: e.terminal.message ?? "" } } };
  }
  if ("state" in e) {
    const s = e.state;
    const deleted = s.deleted ?? false;
    const data = deleted ? Buffer.alloc(0) : Buffer.from(s.data ?? new Uint8Array());
    const state = { namespace: s.namespace, key: s.key ?? "", type: s.type ?? "", data, sha256: "", size: 0, deleted };
    return { payload: { state } };
  }
  return { payload: e.raw };
}
