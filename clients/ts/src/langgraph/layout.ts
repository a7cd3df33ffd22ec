/**
 * A LangGraph.js thread as journald framework state: the layout (the same as the Python
 * saver's, docs/design.md#records) and the pure index over it, without I/O.
 *
 * One thread is one run. Its checkpoints, channel values and pending writes are `state`
 * records, each value exactly as the saver's serde gave it (`dumpsTyped`):
 *
 * - `langgraph.checkpoint` / `[ns, checkpoint_id]`: `{checkpoint (without its channel
 *   values), metadata, parent}`, one per `put`;
 * - `langgraph.blob` / `[ns, channel, version]`: one channel value, written only when `put`
 *   says the channel has a new version (above INLINE_MAX_BYTES it lives in an attachment of
 *   the run, held once per run however many keys name it);
 * - `langgraph.writes` / `[ns, checkpoint_id, task_id, idx, channel, task_path]`: one pending
 *   write.
 *
 * Keys are compact JSON arrays, so no separator is ever ambiguous.
 */
import { randomBytes } from "node:crypto";
import { compareWritesSortKeys, writesSortKey } from "@langchain/langgraph-checkpoint";
import { sha256Hex } from "../canonical";
import { computeFingerprint } from "../fingerprint";
import type { StateEntry } from "../gen/journald/v1/journal";

export const NS_CHECKPOINT = "langgraph.checkpoint";
export const NS_BLOB = "langgraph.blob";
export const NS_WRITES = "langgraph.writes";
export const NAMESPACES = [NS_CHECKPOINT, NS_BLOB, NS_WRITES] as const;
/** Values up to this size are inline in their record; larger ones go to an attachment. */
export const INLINE_MAX_BYTES = 4096;
export const THREAD_LABEL = "langgraph.thread_id";
export const ATTACHMENT_MEDIA_TYPE = "application/vnd.langgraph.value";
/** Every thread's run carries this fingerprint (the Python saver's): graph state, not a model. */
export const FINGERPRINT = computeFingerprint({ provider: "langgraph", model: "langgraph", systemPrompt: [] });

const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

/**
 * The journald run of a thread: the id itself when it is a safe run id, else `lg-` and a
 * digest (as the Python saver spells it, so both name one thread's run alike). An id that
 * would spell an Agents session's run (`oa-...`) is always hashed.
 */
export function runIdFor(threadId: string): string {
  if (!threadId.startsWith("oa-") && SAFE_ID.test(threadId) && Buffer.byteLength(threadId) <= 128) {
    return threadId;
  }
  const name = threadId.startsWith("oa-") ? "\u0000" + threadId : threadId;
  return "lg-" + sha256Hex(Buffer.from(name, "utf8")).slice(0, 40);
}

/**
 * A channel version unique to its branch: the step (zero-padded, so versions order as
 * LangGraph compares them) and a random tail. Two branches forked from one checkpoint write
 * the same channel at the same step; a plain counter would give both the same blob key, and
 * the later branch would overwrite the earlier one's value.
 */
export function nextVersion(current: string | number | undefined): string {
  let n = 0;
  if (typeof current === "number") n = Math.trunc(current);
  else if (typeof current === "string") n = Number.parseInt(current.split(".", 1)[0], 10) || 0;
  return `${String(n + 1).padStart(32, "0")}.${randomBytes(8).toString("hex")}`;
}

export function stateKey(...parts: (string | number)[]): string {
  return JSON.stringify(parts);
}

/** Versions may be numbers or strings; the key spells both as text (as Python's repr does). */
export function versionKey(v: string | number): string {
  return String(v);
}

/** Where a value's bytes are: inline, or in the run attachment `sha256`. */
export interface Ref {
  type: string;
  data: Uint8Array;
  sha256: string;
  size: number;
}

export interface Write {
  key: string;
  taskId: string;
  idx: number;
  channel: string;
  taskPath: string;
  ref: Ref;
}

const slotKey = (taskId: string, idx: number) => `${taskId}\u0000${idx}`;

/** The latest state of one thread, by checkpoint namespace. */
export class ThreadIndex {
  readonly checkpoints = new Map<string, Map<string, Ref>>();
  readonly blobs = new Map<string, Ref>();
  readonly writes = new Map<string, Map<string, Write>>();

  static of(entries: readonly StateEntry[]): ThreadIndex {
    const index = new ThreadIndex();
    for (const e of entries) {
      index.apply(e.namespace, e.key, { type: e.type, data: e.data, sha256: e.sha256, size: e.size });
    }
    return index;
  }

  /** Follow one state record (`ref` undefined: a deletion; an empty key: the namespace). */
  apply(namespace: string, key: string, ref: Ref | undefined): void {
    if (!key) {
      if (ref === undefined) this.clear(namespace);
      return;
    }
    let parts: unknown;
    try {
      parts = JSON.parse(key);
    } catch {
      return; // another framework's key in a shared namespace
    }
    if (!Array.isArray(parts)) return;
    if (namespace === NS_CHECKPOINT && parts.length === 2) {
      const [ns, cid] = parts as [string, string];
      if (ref === undefined) this.checkpoints.get(ns)?.delete(cid);
      else this.nsMap(ns).set(cid, ref);
    } else if (namespace === NS_BLOB && parts.length === 3) {
      if (ref === undefined) this.blobs.delete(key);
      else this.blobs.set(key, ref);
    } else if (namespace === NS_WRITES && parts.length === 6) {
      const [ns, cid, taskId, idx, channel, taskPath] = parts as [string, string, string, number, string, string];
      const group = stateKey(ns, cid);
      let slot = this.writes.get(group);
      if (!slot) this.writes.set(group, (slot = new Map()));
      const sk = slotKey(taskId, idx);
      if (ref === undefined) {
        if (slot.get(sk)?.key === key) slot.delete(sk);
      } else {
        slot.set(sk, { key, taskId, idx, channel, taskPath, ref });
      }
    }
  }

  private nsMap(ns: string): Map<string, Ref> {
    let m = this.checkpoints.get(ns);
    if (!m) this.checkpoints.set(ns, (m = new Map()));
    return m;
  }

  private clear(namespace: string): void {
    if (namespace === NS_CHECKPOINT) this.checkpoints.clear();
    else if (namespace === NS_BLOB) this.blobs.clear();
    else if (namespace === NS_WRITES) this.writes.clear();
  }

  namespaces(): string[] {
    return [...this.checkpoints].filter(([, m]) => m.size > 0).map(([ns]) => ns).sort();
  }

  idsNewestFirst(ns: string): string[] {
    return [...(this.checkpoints.get(ns)?.keys() ?? [])].sort().reverse();
  }

  latest(ns: string): string | undefined {
    return this.idsNewestFirst(ns)[0];
  }

  checkpointRef(ns: string, cid: string): Ref | undefined {
    return this.checkpoints.get(ns)?.get(cid);
  }

  /** The pending writes of a checkpoint in LangGraph's order (task path, task id, idx). */
  writesOf(ns: string, cid: string): Write[] {
    const out = [...(this.writes.get(stateKey(ns, cid))?.values() ?? [])];
    return out.sort((a, b) =>
      compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
    );
  }

  /** The stored (task, idx) slot of a write, if any. */
  storedWrite(ns: string, cid: string, taskId: string, idx: number): Write | undefined {
    return this.writes.get(stateKey(ns, cid))?.get(slotKey(taskId, idx));
  }

  /** The values a checkpoint's channel versions name (a channel stored "empty" is absent). */
  blobRefs(ns: string, versions: Record<string, string | number>): Map<string, Ref> {
    const out = new Map<string, Ref>();
    for (const [channel, version] of Object.entries(versions)) {
      const ref = this.blobs.get(stateKey(ns, channel, versionKey(version)));
      if (ref && ref.type !== "empty") out.set(channel, ref);
    }
    return out;
  }
}
