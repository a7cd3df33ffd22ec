/**
 * `JournaldSaver`: a LangGraph.js checkpointer whose threads are journald runs.
 *
 *     const saver = await JournaldSaver.connect();
 *     const graph = saver.scope(builder.compile({ checkpointer: saver }));
 *     await graph.invoke(inputs, { configurable: { thread_id: "t-1" } });
 *
 * Same layout and rules as the Python saver (docs/design.md#records): a graph run takes the
 * thread's writer lease when LangGraph's loop loads the thread, before any node or tool
 * runs, so a second process driving the thread meanwhile is refused `locked` naming the
 * first, before any of its nodes runs. LangGraph.js gives a checkpointer no end-of-run
 * hook, so `scope(graph)` wraps the graph's `stream` (and with it `invoke`): when the run's
 * output ends (an interrupt, an error or a cancel included), after every write of the run
 * is durable, the lease is given back. A graph run outside `scope` keeps its lease until
 * `release(threadId)` or `close()`. `holdLeases: true` keeps every lease until then (a
 * worker that owns its threads). A write outside a graph run (`updateState`) holds the
 * lease for that write only; `getState` never takes it.
 *
 * Every `put` and `putWrites` is one durable append before it resolves. Values are stored
 * serialized and decoded afresh on every read, so no caller ever shares an object with the
 * store or with another caller.
 */
import { isDeepStrictEqual } from "node:util";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
} from "@langchain/langgraph-checkpoint";
import { Client, type Run } from "../client";
import type { Entry } from "../entry";
import { JournaldError, LeaseLostError, LockedError, SeqConflictError, SessionNotFoundError } from "../errors";
import {
  ATTACHMENT_MEDIA_TYPE,
  FINGERPRINT,
  INLINE_MAX_BYTES,
  NS_BLOB,
  NS_CHECKPOINT,
  NS_WRITES,
  nextVersion,
  type Ref,
  runIdFor,
  stateKey,
  THREAD_LABEL,
  ThreadIndex,
  versionKey,
} from "./layout";

export interface JournaldSaverOptions {
  /** The daemon's socket (default: the client's default socket). */
  socket?: string;
  /** The client name leases are held under (shown to a refused second driver). */
  name?: string;
  serde?: SerializerProtocol;
  /** Keep each thread's lease from its first write until release()/close(). */
  holdLeases?: boolean;
  /** How many threads' leases one saver keeps open at most (the oldest is released). */
  maxHeldThreads?: number;
}

type Typed = [string, Uint8Array];

/** One state record to append: a value, or a deletion (`typed` undefined). */
interface Change {
  namespace: string;
  key: string;
  typed?: Typed;
}

interface Held {
  run: Run;
  index: ThreadIndex;
}

interface Stored {
  checkpoint: Omit<Checkpoint, "channel_values">;
  metadata?: CheckpointMetadata;
  parent?: string;
}

const EMPTY: Typed = ["empty", new Uint8Array()];

/**
 * True when the config is the one LangGraph's loop loads a thread with to run nodes on it:
 * every graph run carries its run control (`control`) and the abort signal of its stream;
 * getState, getStateHistory and updateState read with the caller's own config.
 */
function startingGraphRun(config: RunnableConfig): boolean {
  const c = config as { control?: unknown; signal?: unknown };
  return c.control !== undefined && c.signal !== undefined;
}

function threadOf(config: RunnableConfig): { threadId: string; ns: string } {
  const conf = config.configurable ?? {};
  const threadId = conf.thread_id;
  if (threadId === undefined || threadId === null || threadId === "") {
    throw new Error(
      "the config has no configurable.thread_id: LangGraph needs one to find the thread's " +
        "checkpoints (pass { configurable: { thread_id: ... } })",
    );
  }
  return { threadId: String(threadId), ns: String(conf.checkpoint_ns ?? "") };
}

/** The same error told in LangGraph's words: what happened to the thread, what to do. */
function inGraphTerms(threadId: string, err: unknown): unknown {
  if (!(err instanceof JournaldError)) return err;
  const metadata = { ...err.metadata, thread_id: threadId };
  if (err instanceof LockedError) {
    const who = err.metadata.holder_pid ? `pid ${err.metadata.holder_pid}` : "another process";
    const name = err.metadata.holder_name ? ` (${err.metadata.holder_name})` : "";
    return new LockedError(
      err.code,
      `LangGraph thread ${JSON.stringify(threadId)} is being run by ${who}${name}: two runs of one ` +
        "thread at once would fork it, so this run did not start any node. Wait for that run to " +
        "end (its lease ends when its invoke returns or the process exits), or use another thread_id",
      { grpcCode: err.grpcCode, metadata, cause: err },
    );
  }
  const Kind = err.constructor as new (...a: ConstructorParameters<typeof JournaldError>) => JournaldError;
  return new Kind(
    err.code,
    `LangGraph thread ${JSON.stringify(threadId)}: the checkpointer could not save this step ` +
      `(${err.code}: ${err.message}); the thread keeps its last saved checkpoint`,
    { grpcCode: err.grpcCode, metadata, diff: err.diff, cause: err },
  );
}

export class JournaldSaver extends BaseCheckpointSaver {
  readonly client: Client;
  readonly name: string;
  readonly holdLeases: boolean;
  readonly maxHeldThreads: number;
  private readonly ownsClient: boolean;
  private readonly held = new Map<string, Held>();
  /** Graph runs in progress under scope(), per thread: the lease is kept while any is. */
  private readonly running = new Map<string, number>();
  /** Threads a graph run outside scope() loaded: held until release() or close(). */
  private readonly pinned = new Set<string>();
  /** The conflict that ended a graph run's right to write a thread, until that run ends. */
  private readonly refused = new Map<string, SeqConflictError>();
  /** Journal seq of each thread's last read without its lease (see writer). */
  private readonly readSeq = new Map<string, number>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(client: Client, opts: JournaldSaverOptions & { ownsClient?: boolean } = {}) {
    super(opts.serde);
    this.client = client;
    this.name = opts.name ?? "langgraph";
    this.holdLeases = opts.holdLeases ?? false;
    this.maxHeldThreads = Math.max(1, opts.maxHeldThreads ?? 64);
    this.ownsClient = opts.ownsClient ?? false;
  }

  /** A saver over its own connection to the daemon (closed by close()). */
  static async connect(opts: JournaldSaverOptions = {}): Promise<JournaldSaver> {
    const client = await Client.connect({ socket: opts.socket, clientName: opts.name ?? "langgraph" });
    return new JournaldSaver(client, { ...opts, ownsClient: true });
  }

  /**
   * Branch-unique string versions (see nextVersion). LangGraph.js types versions as numbers
   * here, but its loop only compares them (compareChannelVersions orders strings too), so
   * `graph.compile({ checkpointer })` accepts the saver as it is.
   */
  override getNextVersion(current: number | undefined): number {
    return nextVersion(current as string | number | undefined) as unknown as number;
  }

  /** Run `fn` alone: the saver's reads and writes never interleave. */
  private locked<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  // --- leases -------------------------------------------------------------------------------

  private async writer(threadId: string): Promise<Held> {
    const held = this.held.get(threadId);
    if (held && !held.run.ended && !held.run.error) {
      this.held.delete(threadId); // most recently used last
      this.held.set(threadId, held);
      return held;
    }
    const refused = this.refused.get(threadId);
    if (refused) throw refused;
    if (held) await this.forget(threadId, held);
    let run: Run;
    try {
      run = await this.client.startOrResume({
        runId: runIdFor(threadId),
        fingerprint: FINGERPRINT,
        labels: { [THREAD_LABEL]: threadId },
      });
    } catch (err) {
      throw inGraphTerms(threadId, err);
    }
    const readSeq = this.readSeq.get(threadId);
    this.readSeq.delete(threadId);
    if (readSeq !== undefined && run.lastSeq > readSeq) {
      await run.close();
      // this process read the thread without its lease and another writer appended since:
      // writing now would fork the thread from a checkpoint that is no longer its latest
      const err = new SeqConflictError(
        "seq_conflict",
        `thread ${threadId} changed since this process read it (journal seq ${readSeq}, now ` +
          `${run.lastSeq}): another process wrote to it in between; invoke the graph again to ` +
          "continue from the thread's latest checkpoint",
        { metadata: { thread_id: threadId, read_seq: String(readSeq), seq: String(run.lastSeq) } },
      );
      // a graph run goes on after a failed write until its superstep ends: every later write
      // of that run is refused the same way, so none of it lands on the other writer's thread
      if (this.running.has(threadId) || this.pinned.has(threadId)) this.refused.set(threadId, err);
      throw err;
    }
    const fresh = { run, index: ThreadIndex.of(run.state?.state ?? []) };
    this.held.set(threadId, fresh);
    for (const old of this.held.keys()) {
      if (this.held.size <= this.maxHeldThreads) break;
      if (old !== threadId && !this.running.has(old)) await this.drop(old);
    }
    return fresh;
  }

  /**
   * The daemon ended this lease (a restart, a lost lease) and nothing read the thread since:
   * the caller acts on the thread as of this lease's last write, so a writer who came in
   * between is a conflict (a graph run's loop holds its checkpoint in memory).
   */
  private async forget(threadId: string, held: Held): Promise<void> {
    this.readSeq.set(threadId, held.run.lastSeq);
    this.held.delete(threadId);
    await held.run.close();
  }

  private async drop(threadId: string): Promise<void> {
    const held = this.held.get(threadId);
    this.held.delete(threadId);
    this.pinned.delete(threadId);
    this.refused.delete(threadId);
    if (held) await held.run.close();
  }

  /** After a write outside a graph run: give the lease back (unless leases are kept). */
  private async settle(threadId: string): Promise<void> {
    if (!this.holdLeases && !this.running.has(threadId) && !this.pinned.has(threadId)) await this.drop(threadId);
  }

  /** Take the thread's writer lease now (`LockedError` if another process holds it). */
  hold(threadId: string): Promise<void> {
    return this.locked(async () => {
      await this.writer(threadId);
    });
  }

  /** Give the thread's writer lease back (another process may drive it next). */
  release(threadId: string): Promise<void> {
    return this.locked(() => this.drop(threadId));
  }

  /** Release every lease; close the connection if the saver made it. */
  async close(): Promise<void> {
    await this.locked(async () => {
      for (const threadId of [...this.held.keys()]) await this.drop(threadId);
    });
    if (this.ownsClient) this.client.close();
  }

  /**
   * The graph with its `stream` (and so `invoke`) wrapped: each run's thread lease is given
   * back when the run's output ends (finished, interrupted, failed or cancelled), after
   * every checkpoint write of the run is durable (LangGraph closes the output only then).
   */
  scope<G extends object>(graph: G): G {
    const g = graph as unknown as { stream: (input: unknown, options?: RunnableConfig) => Promise<unknown> };
    const stream = g.stream.bind(graph);
    Object.defineProperty(graph, "stream", {
      configurable: true,
      writable: true,
      value: async (input: unknown, options?: RunnableConfig) => {
        const id = options?.configurable?.thread_id;
        if (id === undefined || id === null || id === "") return stream(input, options);
        const threadId = String(id);
        this.running.set(threadId, (this.running.get(threadId) ?? 0) + 1);
        let once = false;
        const end = async () => {
          if (once) return;
          once = true;
          await this.endRun(threadId);
        };
        try {
          return endWhenDone((await stream(input, options)) as AsyncIterator<unknown>, end);
        } catch (err) {
          await end();
          throw err;
        }
      },
    });
    return graph;
  }

  private endRun(threadId: string): Promise<void> {
    return this.locked(async () => {
      const left = (this.running.get(threadId) ?? 1) - 1;
      if (left > 0) {
        this.running.set(threadId, left);
        return;
      }
      this.running.delete(threadId);
      this.refused.delete(threadId);
      if (!this.holdLeases) await this.drop(threadId);
    });
  }

  // --- reading ------------------------------------------------------------------------------

  private async index(threadId: string): Promise<ThreadIndex | undefined> {
    const held = this.held.get(threadId);
    if (held && !held.run.ended && !held.run.error) return held.index;
    // A graph run that lost its lease goes on from the checkpoint its loop holds, whatever
    // this read sees: its next write is checked against its own last one (see writer).
    const runGoesOn = held !== undefined && (this.running.has(threadId) || this.pinned.has(threadId));
    if (held && !runGoesOn) await this.drop(threadId);
    try {
      const folded = await this.client.fold(runIdFor(threadId));
      if (!runGoesOn) this.readSeq.set(threadId, folded.state?.lastSeq ?? 0);
      return ThreadIndex.of(folded.state?.state ?? []);
    } catch (err) {
      if (err instanceof SessionNotFoundError) return undefined;
      throw err;
    }
  }

  private async bytes(threadId: string, ref: Ref): Promise<Uint8Array> {
    return ref.sha256 ? this.client.getAttachment(runIdFor(threadId), ref.sha256) : ref.data;
  }

  private async load(threadId: string, ref: Ref): Promise<unknown> {
    return this.serde.loadsTyped(ref.type, await this.bytes(threadId, ref));
  }

  private async tuple(threadId: string, index: ThreadIndex, ns: string, cid: string): Promise<CheckpointTuple | undefined> {
    const ref = index.checkpointRef(ns, cid);
    if (!ref) return undefined;
    const stored = (await this.load(threadId, ref)) as Stored;
    const channelValues: Record<string, unknown> = {};
    for (const [channel, blob] of index.blobRefs(ns, stored.checkpoint.channel_versions ?? {})) {
      channelValues[channel] = await this.load(threadId, blob);
    }
    const pendingWrites: CheckpointPendingWrite[] = [];
    for (const w of index.writesOf(ns, cid)) {
      pendingWrites.push([w.taskId, w.channel, await this.load(threadId, w.ref)]);
    }
    const checkpoint = { ...stored.checkpoint, channel_values: channelValues } as Checkpoint;
    if (checkpoint.v < 4 && stored.parent) await this.migrateSends(threadId, index, ns, stored.parent, checkpoint);
    const out: CheckpointTuple = {
      config: { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: cid } },
      checkpoint,
      metadata: stored.metadata,
      pendingWrites,
    };
    if (stored.parent) {
      out.parentConfig = { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: stored.parent } };
    }
    return out;
  }

  /**
   * A checkpoint of format v3 or older kept its pending sends as writes of its parent: they
   * become the TASKS channel of the loaded checkpoint, as the format LangGraph now reads.
   */
  private async migrateSends(threadId: string, index: ThreadIndex, ns: string, parent: string, checkpoint: Checkpoint) {
    const sends: unknown[] = [];
    for (const w of index.writesOf(ns, parent)) {
      if (w.channel === TASKS) sends.push(await this.load(threadId, w.ref));
    }
    const versions = Object.values(checkpoint.channel_versions ?? {});
    checkpoint.channel_values[TASKS] = sends;
    checkpoint.channel_versions = {
      ...checkpoint.channel_versions,
      [TASKS]: versions.length ? maxChannelVersion(...versions) : this.getNextVersion(undefined),
    };
  }

  override async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    if (config.configurable?.thread_id === undefined) return undefined;
    const { threadId, ns } = threadOf(config);
    return this.locked(async () => {
      if (startingGraphRun(config)) {
        // the lease comes first, so the read below is the thread as this run will write it
        this.readSeq.delete(threadId);
        this.refused.delete(threadId);
        await this.writer(threadId);
        if (!this.running.has(threadId)) this.pinned.add(threadId);
      }
      const index = await this.index(threadId);
      if (!index) return undefined;
      const cid = getCheckpointId(config) || index.latest(ns);
      return cid ? this.tuple(threadId, index, ns, cid) : undefined;
    });
  }

  private async threadIds(): Promise<string[]> {
    const out: string[] = [];
    for (const info of await this.client.list()) {
      if (info.model !== FINGERPRINT.model) continue;
      try {
        const labels = (await this.client.fold(info.runId)).state?.labels ?? {};
        out.push(labels[THREAD_LABEL] ?? info.runId);
      } catch (err) {
        if (!(err instanceof SessionNotFoundError)) throw err; // deleted meanwhile
      }
    }
    return out;
  }

  override async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    const found = await this.locked(() => this.select(config, options));
    yield* found;
  }

  private async select(config: RunnableConfig, options: CheckpointListOptions): Promise<CheckpointTuple[]> {
    const conf = config.configurable ?? {};
    const wantNs: string | undefined = conf.checkpoint_ns;
    const wantId: string | undefined = conf.checkpoint_id;
    const beforeId = options.before?.configurable?.checkpoint_id as string | undefined;
    const out: CheckpointTuple[] = [];
    const limit = options.limit;
    const threads = conf.thread_id !== undefined ? [String(conf.thread_id)] : await this.threadIds();
    for (const threadId of threads) {
      const index = await this.index(threadId);
      if (!index) continue;
      for (const ns of index.namespaces()) {
        if (wantNs !== undefined && ns !== wantNs) continue;
        for (const cid of index.idsNewestFirst(ns)) {
          if ((wantId && cid !== wantId) || (beforeId && cid >= beforeId)) continue;
          if (limit !== undefined && out.length >= limit) return out;
          const tup = await this.tuple(threadId, index, ns, cid);
          if (!tup || !matches(tup.metadata, options.filter)) continue;
          out.push(tup);
        }
      }
    }
    return out;
  }

  // --- writing ------------------------------------------------------------------------------

  private async append(threadId: string, changes: Change[]): Promise<void> {
    try {
      await this.appendUnder(await this.writer(threadId), threadId, changes);
    } catch (err) {
      const held = this.held.get(threadId);
      if (!(err instanceof LeaseLostError) || held === undefined) throw err;
      // the daemon ended the lease before this process saw its Open stream close (a loaded
      // machine delays that news): the same as a lease seen to end, checked the same way
      await this.forget(threadId, held);
      await this.appendUnder(await this.writer(threadId), threadId, changes);
    }
  }

  private async appendUnder(held: Held, threadId: string, changes: Change[]): Promise<void> {
    const entries: Entry[] = [];
    const refs: (Ref | undefined)[] = [];
    try {
      for (const ch of changes) {
        if (!ch.typed) {
          entries.push({ state: { namespace: ch.namespace, key: ch.key, deleted: true } });
          refs.push(undefined);
          continue;
        }
        const [type, data] = ch.typed;
        if (data.length > INLINE_MAX_BYTES) {
          const att = await this.client.putAttachment(held.run.id, data, ATTACHMENT_MEDIA_TYPE, type);
          const state = { namespace: ch.namespace, key: ch.key, type, data: Buffer.alloc(0), sha256: att.sha256, size: att.size, deleted: false };
          entries.push({ raw: { state } });
          refs.push({ type, data: new Uint8Array(), sha256: att.sha256, size: att.size });
        } else {
          entries.push({ state: { namespace: ch.namespace, key: ch.key, type, data } });
          refs.push({ type, data, sha256: "", size: 0 });
        }
      }
      if (entries.length === 0) return;
      await held.run.appendMany(entries);
    } catch (err) {
      throw inGraphTerms(threadId, err);
    }
    changes.forEach((ch, i) => held.index.apply(ch.namespace, ch.key, refs[i]));
  }

  override async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    const { threadId, ns } = threadOf(config);
    // serialize now: the loop goes on mutating its checkpoint once put returns a promise
    const copy = copyCheckpoint(checkpoint);
    const values = copy.channel_values ?? {};
    const { channel_values: _values, ...rest } = copy;
    const blobs = handled(
      Promise.all(
        Object.entries(newVersions).map(async ([channel, version]) => ({
          namespace: NS_BLOB,
          key: stateKey(ns, channel, versionKey(version)),
          typed: channel in values ? await this.serde.dumpsTyped(values[channel]) : EMPTY,
        })),
      ),
    );
    const stored: Stored = { checkpoint: rest, metadata, parent: config.configurable?.checkpoint_id };
    const record = handled(this.serde.dumpsTyped(stored));
    // the lock is taken in call order, so appends keep the order LangGraph made its calls in
    await this.locked(async () => {
      const changes: Change[] = await blobs;
      changes.push({ namespace: NS_CHECKPOINT, key: stateKey(ns, checkpoint.id), typed: await record });
      await this.append(threadId, changes);
      await this.settle(threadId);
    });
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpoint.id } };
  }

  override async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    const { threadId, ns } = threadOf(config);
    const cid = config.configurable?.checkpoint_id as string | undefined;
    if (!cid) {
      throw new Error("putWrites needs configurable.checkpoint_id (the checkpoint the writes belong to)");
    }
    const serialized = handled(Promise.all(writes.map(([, value]) => this.serde.dumpsTyped(value))));
    await this.locked(async () => {
      const typed = await serialized;
      const index = (await this.writer(threadId)).index;
      const changes: Change[] = [];
      writes.forEach(([channel], i) => {
        const idx = WRITES_IDX_MAP[channel] ?? i;
        const old = index.storedWrite(ns, cid, taskId, idx);
        if (idx >= 0 && old) return; // a regular write is stored once per (task, idx)
        const key = stateKey(ns, cid, taskId, idx, channel, taskPath);
        if (old && old.key !== key) changes.push({ namespace: NS_WRITES, key: old.key });
        changes.push({ namespace: NS_WRITES, key, typed: typed[i] });
      });
      await this.append(threadId, changes);
      await this.settle(threadId);
    });
  }

  override async deleteThread(threadId: string): Promise<void> {
    await this.locked(async () => {
      await this.drop(threadId);
      this.readSeq.delete(threadId);
      try {
        await this.client.delete(runIdFor(threadId));
      } catch (err) {
        if (!(err instanceof SessionNotFoundError)) throw err;
      }
    });
  }
}

/** The promise, marked handled: it is awaited later, once the saver's lock is ours. */
function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

function matches(metadata: CheckpointMetadata | undefined, filter: Record<string, unknown> | undefined): boolean {
  if (!filter) return true;
  const m = (metadata ?? {}) as Record<string, unknown>;
  return Object.entries(filter).every(([k, v]) => isDeepStrictEqual(m[k], v));
}

/**
 * The same async iterator, calling `end` once when it is exhausted, fails or is returned
 * or cancelled early (LangGraph's output stream is a ReadableStream with these methods).
 */
function endWhenDone<S extends AsyncIterator<unknown>>(stream: S, end: () => Promise<void>): S {
  const s = stream as S & { cancel?: (reason?: unknown) => Promise<void> };
  const next = s.next.bind(s);
  s.next = async (...args: [] | [unknown]) => {
    try {
      const r = await next(...args);
      if (r.done) await end();
      return r;
    } catch (err) {
      await end();
      throw err;
    }
  };
  for (const name of ["return", "throw", "cancel"] as const) {
    const original = (s as Record<string, unknown>)[name] as ((...a: unknown[]) => Promise<unknown>) | undefined;
    if (typeof original !== "function") continue;
    (s as Record<string, unknown>)[name] = async (...args: unknown[]) => {
      try {
        return await original.apply(s, args);
      } finally {
        await end();
      }
    };
  }
  return s;
}
