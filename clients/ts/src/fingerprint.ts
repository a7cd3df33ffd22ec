/** Fingerprint hashing (docs/protocol.md#fingerprint): only hashes leave the agent process. */
import { canonical, sha256Hex } from "./canonical";
import type { Fingerprint } from "./gen/journald/v1/journal";

/** SHA-256 hex of the system prompt blocks as a canonical JSON array of strings. */
export function hashSystemPrompt(blocks: readonly string[] | string): string {
  return sha256Hex(canonical(typeof blocks === "string" ? [blocks] : [...blocks]));
}

/** SHA-256 hex of the tool definitions as a canonical JSON array, in declared order. */
export function hashTools(tools: readonly unknown[]): string {
  return sha256Hex(canonical([...tools]));
}

/** The raw configuration a fingerprint is computed from. */
export interface AgentConfig {
  provider: string;
  model: string;
  systemPrompt: readonly string[] | string;
  tools?: readonly unknown[];
  /** "off" when omitted. */
  thinking?: string;
  maxTokens?: number;
  maxIterations?: number;
}

/** Compute a fingerprint locally from the raw configuration. */
export function computeFingerprint(c: AgentConfig): Fingerprint {
  return {
    provider: c.provider,
    model: c.model,
    systemPromptSha256: hashSystemPrompt(c.systemPrompt),
    toolsSha256: hashTools(c.tools ?? []),
    thinking: c.thinking ?? "off",
    maxTokens: c.maxTokens ?? 0,
    maxIterations: c.maxIterations ?? 0,
  };
}
