/**
 * The journald client: @grpc/grpc-js over the daemon's unix socket, with the stubs
 * ts-proto generates from proto/journald/v1/journal.proto (src/gen).
 *
 * Same shape as the Python client: connect, start / resume with a fingerprint (the lease
 * lives as long as the Run), append the record kinds with seq handled, fold,
 * completePending for the calls a crashed writer left unanswered, typed errors.
 */
import * as os from "node:os";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import {
  ChannelOptions,
  credentials,
  Metadata,
  ServiceError,
  status as Status,
} from "@grpc/grpc-js";
import { canonical, parseJson } from "./canonical";
import {
  AssistantTurn,
  Block,
  buildEntry,
  Built,
  Entry,
  resultAttachmentBytes,
  text,
  ToolResultInput,
} from "./entry";
import { fromServiceError, InvalidRequestError, JournaldError, LockedError, retryInPlace } from "./errors";
import {
  Ack,
  AppendResponse,
  DeleteResponse,
  Fingerprint,
  FoldResponse,
  GetAttachmentResponse,
  JournalServiceClient,
  Lease,
  LeaseEnded,
  ListResponse,
  OpenMode,
  OpenRequest,
  OpenResponse,
  PutAttachmentResponse,
  Record as JournalRecord,
  RunInfo,
  RunState,
  ToolCall,
  TraceContext,
  VerifyResponse,
  Warning,
} from "./gen/journald/v1/journal";
import { spanIds, traceMetadata } from "./otel";
import { LeaseSet } from "./lease_set";
import { ListChange, listChanges, ListChangesOptions } from "./list_changes";
import { PipelinedOptions, PipelinedWriter } from "./pipelined";
import { checkSocket, defaultSocketPath, target } from "./socket";
import { completeFold, completeState, DEFAULT_MESSAGE_WINDOW } from "./window";

/** RFC 3339 UTC with microseconds: 2026-11-30T12:00:00.000000Z. */
export function formatTimestamp(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** Per-call options. */
export interface CallOpts {
  /** The OpenTelemetry Context to propagate (default: the active one). */
  otelContext?: unknown;
  /** Deadline in milliseconds from now. */
  timeoutMs?: number;
}

export interface ConnectOptions {
  /** Socket path (default: defaultSocketPath()). */
  socket?: string;
  /**
   * The uid (or user name) the daemon runs as (default $JOURNALD_DAEMON_UID, else this
   * process's uid): connect refuses a socket owned by anyone else but root, before dialing.
   */
  daemonUid?: number | string;
  /** Clock for record `ts` and meta `created` (tests pin it for byte-identical journals). */
  clock?: () => Date;
  /** The agent name shown in `locked` errors. */
  clientName?: string;
  /** How long to wait for the daemon to report SERVING (default 10 s). */
  timeoutMs?: number;
  /** Largest gRPC message sent or received (default MAX_MESSAGE_BYTES, 16 MiB). */
  maxMessageBytes?: number;
  /** Extra channel options (they win over maxMessageBytes). */
  channelOptions?: ChannelOptions;
  /**
   * How many of the newest messages an Open or Fold asks for (default
   * DEFAULT_MESSAGE_WINDOW, 1000); the earlier ones are paged through History before start,
   * resume and fold return. 0 asks for every message in one answer, which fails with
   * response_too_large when the state is over the daemon's max message size.
   */
  messageWindow?: number;
}

/**
 * Default cap of a gRPC message both ways: the daemon's own default (16 MiB,
 * `journald serve --max-message-bytes`).
 */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/** How long run.close() waits for Release before cancelling the stream anyway. */
export const RELEASE_TIMEOUT_MS = 2000;

/**
 * Set once a daemon answered Release with UNIMPLEMENTED (older than Release): close() then
 * releases only by cancelling the stream, which that daemon sees a moment later.
 */
let releaseUnsupported = false;

export interface StartOptions extends CallOpts {
  runId: string;
  fingerprint: Fingerprint;
  interactive?: boolean;
  /** The initial user prompt as content blocks. */
  prompt?: Block[];
  labels?: { [key: string]: string };
}

export interface ResumeOptions extends CallOpts {
  runId: string;
  fingerprint: Fingerprint;
  interactive?: boolean;
  /** Waive fingerprint drift (never a provider change). */
  force?: boolean;
}

/** What a tool function returns: result blocks (a string becomes one text block). */
export type ToolOutput = Block[] | string | { content: Block[] | string; isError?: boolean };

/** Runs one tool call; a thrown error is journaled as an is_error result with its text. */
export type ToolFn = (call: ToolCall) => Promise<ToolOutput> | ToolOutput;

function deadline(opts?: CallOpts): { deadline?: Date } {
  return opts?.timeoutMs ? { deadline: new Date(Date.now() + opts.timeoutMs) } : {};
}

/** The record's trace field from the span of opts' context (none without one). */
function recordTrace(opts?: CallOpts): TraceContext | undefined {
  const ids = spanIds(opts?.otelContext);
  return ids ? { traceId: ids.traceId, spanId: ids.spanId } : undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Run ids this process holds a lease on (a Run not yet closed), across clients. */
const OPEN_RUNS = new Set<string>();

/** A connection to one daemon. */
export class Client {
  readonly rpc: JournalServiceClient;
  readonly socket: string;
  private readonly clock: () => Date;
  private readonly clientName: string;
  private readonly messageWindow: number;

  private constructor(socket: string, opts: ConnectOptions) {
    this.socket = socket;
    this.clock = opts.clock ?? (() => new Date());
    this.clientName = opts.clientName ?? "journald-ts";
    this.messageWindow = Math.max(0, opts.messageWindow ?? DEFAULT_MESSAGE_WINDOW);
    const max = opts.maxMessageBytes ?? MAX_MESSAGE_BYTES;
    this.rpc = new JournalServiceClient(target(socket), credentials.createInsecure(), {
      "grpc.max_receive_message_length": max,
      "grpc.max_send_message_length": max,
      ...opts.channelOptions,
    });
  }

  /** Dial the daemon and wait until grpc.health.v1 reports SERVING. */
  static async connect(opts: ConnectOptions = {}): Promise<Client> {
    const socket = opts.socket ?? defaultSocketPath();
    checkSocket(socket, opts.daemonUid); // docs/protocol.md#peer-identity
    const c = new Client(socket, opts);
    const until = Date.now() + (opts.timeoutMs ?? 10_000);
    let last: unknown;
    for (;;) {
      try {
        const status = await c.healthCheck(Math.max(until - Date.now(), 1));
        if (status === 1) return c;
        last = new Error(`health status ${status}`);
      } catch (err) {
        last = err;
      }
      if (Date.now() >= until) {
        c.close();
        throw new JournaldError("unavailable", `daemon at ${c.socket} is not serving: ${String(last)}`, {
          cause: last,
        });
      }
      await sleep(50);
    }
  }

  /** grpc.health.v1.Health/Check for the whole server: 1 = SERVING. */
  private healthCheck(timeoutMs: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.rpc.makeUnaryRequest(
        "/grpc.health.v1.Health/Check",
        () => Buffer.alloc(0), // HealthCheckRequest{service: ""} encodes to no bytes
        (buf: Buffer) => {
          const r = new BinaryReader(buf);
          let status = 0;
          while (r.pos < r.len) {
            const [field, wire] = r.tag();
            if (field === 1) status = r.int32();
            else r.skip(wire);
          }
          return status;
        },
        {},
        new Metadata(),
        { deadline: new Date(Date.now() + Math.min(timeoutMs, 2000)) },
        (err: ServiceError | null, status?: number) => (err ? reject(err) : resolve(status ?? 0)),
      );
    });
  }

  /** Close the channel (and with it every lease still open on it). */
  close(): void {
    this.rpc.close();
  }

  /** @internal */
  now(): string {
    return formatTimestamp(this.clock());
  }

  /** @internal Run a unary call and turn a failure into a typed error. */
  unary<Req, Res>(
    method: (req: Req, md: Metadata, o: { deadline?: Date }, cb: (e: ServiceError | null, r: Res) => void) => unknown,
    req: Req,
    opts?: CallOpts,
  ): Promise<Res> {
    return new Promise((resolve, reject) => {
      method.call(this.rpc, req, traceMetadata(opts?.otelContext), deadline(opts), (err, res) =>
        err ? reject(fromServiceError(err)) : resolve(res),
      );
    });
  }

  /** A run's folded state (and the governed view when governed), with every message. */
  async fold(runId: string, governed = false, opts?: CallOpts): Promise<FoldResponse> {
    const req = { runId, governed, omitMessages: false, messageWindow: this.messageWindow };
    const resp: FoldResponse = await this.unary(this.rpc.fold, req, opts);
    await completeFold(this, runId, resp, opts);
    return resp;
  }

  /** Check a run's hash chain and record schemas end to end. */
  verify(runId: string, opts?: CallOpts): Promise<VerifyResponse> {
    return this.unary(this.rpc.verify, { runId }, opts);
  }

  /** A run's records from fromSeq (0 = all), with their canonical bytes and hashes. */
  load(runId: string, fromSeq = 0, opts?: CallOpts): Promise<JournalRecord[]> {
    return new Promise((resolve, reject) => {
      const out: JournalRecord[] = [];
      const call = this.rpc.load({ runId, fromSeq }, traceMetadata(opts?.otelContext), deadline(opts));
      call.on("data", (m) => m.record && out.push(m.record));
      call.on("error", (err) => reject(fromServiceError(err)));
      call.on("end", () => resolve(out));
    });
  }

  /** Create a run and take its writer lease. */
  start(o: StartOptions): Promise<Run> {
    return this.open(this.openRequest(o, OpenMode.OPEN_MODE_CREATE), o);
  }

  /**
   * Resume the run if it exists, else create it (OPEN_MODE_CREATE_OR_RESUME), and take its
   * writer lease: what a framework adapter does when it reaches a thread it may not have.
   */
  startOrResume(o: StartOptions): Promise<Run> {
    return this.open(this.openRequest(o, OpenMode.OPEN_MODE_CREATE_OR_RESUME), o);
  }


  /** The runs the daemon stores (newest first, at most `limit`; 0 = all). */
  async list(limit = 0, opts?: CallOpts): Promise<RunInfo[]> {
    const resp: ListResponse = await this.unary(this.rpc.list, { limit }, opts);
    return resp.runs;
  }

  /**
   * Follow which runs' listing rows change: an async iterable of notices, the ready one
   * first; abort `opts.signal` (or break the loop) to stop (docs/protocol.md#list-changes).
   */
  listChanges(opts?: ListChangesOptions): AsyncGenerator<ListChange> {
    return listChanges(this.rpc, opts);
  }

  /** Delete a run and everything it keeps; false when there was none. */
  async delete(runId: string, opts?: CallOpts): Promise<boolean> {
    const resp: DeleteResponse = await this.unary(this.rpc.delete, { runId }, opts);
    return resp.deleted;
  }

  /** Store bytes as an attachment of a run (content-addressed: equal bytes are held once). */
  putAttachment(runId: string, data: Uint8Array, mediaType: string, name = "", opts?: CallOpts): Promise<PutAttachmentResponse> {
    return this.unary(this.rpc.putAttachment, { runId, data: Buffer.from(data), mediaType, name }, opts);
  }

  /** The bytes of a run's attachment by SHA-256 (AttachmentNotFoundError if absent). */
  async getAttachment(runId: string, sha256: string, opts?: CallOpts): Promise<Uint8Array> {
    const resp: GetAttachmentResponse = await this.unary(this.rpc.getAttachment, { runId, sha256 }, opts);
    return resp.data;
  }

  /** An empty LeaseSet: many runs' leases over one `Leases` stream (opened on first use). */
  leaseSet(): LeaseSet {
    return new LeaseSet(this);
  }

  /** Resume an existing run and take its writer lease; the resume gates apply. */
  resume(o: ResumeOptions): Promise<Run> {
    return this.open(this.resumeRequest(o), o);
  }

  /** @internal The OpenRequest of start / startOrResume (shared with LeaseSet). */
  openRequest(o: StartOptions, mode: OpenMode): OpenRequest {
    return {
      runId: o.runId,
      mode,
      fingerprint: o.fingerprint,
      interactive: o.interactive ?? false,
      force: false,
      promptJson: canonical(o.prompt ?? []),
      labels: o.labels ?? {},
      client: undefined,
      created: this.now(),
      trace: recordTrace(o),
      messageWindow: this.messageWindow,
    };
  }

  /** @internal The OpenRequest of resume (shared with LeaseSet). */
  resumeRequest(o: ResumeOptions): OpenRequest {
    return {
      runId: o.runId,
      mode: OpenMode.OPEN_MODE_RESUME,
      fingerprint: o.fingerprint,
      interactive: o.interactive ?? false,
      force: o.force ?? false,
      promptJson: Buffer.alloc(0),
      labels: {},
      client: undefined,
      created: "",
      trace: undefined,
      messageWindow: this.messageWindow,
    };
  }

  /** @internal Who this process is, as every OpenRequest declares it. */
  clientInfo(): OpenRequest["client"] {
    return { name: this.clientName, pid: process.pid, host: os.hostname(), cwd: process.cwd() };
  }


  /**
   * Open. `run.close()` calls Release, so a re-open right after it never sees `locked`.
   * Only against an old daemon without Release does the lease end a moment after close()
   * resolves: there, a `locked` error naming this very process as the holder of a run it no
   * longer has open is that window, and is retried for up to 3 s. Every other error, and a
   * lock held by anyone else, is thrown at once.
   */
  private async open(req: OpenRequest, opts: CallOpts): Promise<Run> {
    const until = Date.now() + 3000;
    for (;;) {
      try {
        return await this.openOnce(req, opts);
      } catch (err) {
        const ours =
          releaseUnsupported &&
          err instanceof LockedError &&
          err.metadata.holder_pid === String(process.pid) &&
          err.metadata.holder_host === os.hostname() &&
          !OPEN_RUNS.has(req.runId);
        if (!ours || Date.now() >= until) throw err;
        await sleep(20);
      }
    }
  }

  private openOnce(req: OpenRequest, opts: CallOpts): Promise<Run> {
    req.client = this.clientInfo();
    // The stream has no deadline: the lease lives exactly as long as it does.
    const call = this.rpc.open(req, traceMetadata(opts.otelContext));
    return new Promise((resolve, reject) => {
      let run: Run | undefined;
      let granted = false;
      // what the stream says while the messages before the window are still being paged
      let early: { ended?: LeaseEnded; failed?: ServiceError; closed?: boolean } = {};
      call.on("data", (m: OpenResponse) => {
        if (!granted) {
          if (!m.lease) {
            call.cancel();
            reject(new JournaldError("internal", `Open for ${req.runId} answered without a lease`));
            return;
          }
          granted = true;
          const lease = m.lease;
          completeState(this, req.runId, lease.state, opts).then(
            () => {
              run = new Run(this, lease, call);
              if (early.ended) run._ended(early.ended);
              if (early.failed) run._failed(early.failed);
              if (early.closed) run._closed();
              early = {};
              resolve(run);
            },
            (err: unknown) => {
              call.cancel();
              reject(err);
            },
          );
        } else if (m.ended) {
          if (run) run._ended(m.ended);
          else early.ended = m.ended;
        }
      });
      call.on("error", (err: ServiceError) => {
        if (!granted) reject(fromServiceError(err));
        else if (run) run._failed(err);
        else early.failed = err;
      });
      call.on("close", () => {
        if (run) run._closed();
        else early.closed = true;
      });
    });
  }
}

/** An open run holding the writer lease. Appends are serialized; seqs are handled. */
export class Run {
  readonly id: string;
  readonly lease: Lease;
  private readonly client: Client;
  private readonly call: { cancel(): void };
  private readonly releaser: ((run: Run) => Promise<void>) | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private pending: ToolCall[];
  private _lastSeq: number;
  private _lastHash: string;
  private _nextIteration: number;
  private endReason: LeaseEnded | undefined;
  private streamError: unknown;
  private resolveClosed!: () => void;
  private isClosed = false;
  private writer: PipelinedWriter | undefined;
  /** Settles when the lease stream has finished (close(), daemon shutdown, deletion). */
  readonly closed: Promise<void>;

  /** @internal */
  constructor(
    client: Client,
    lease: Lease,
    call: { cancel(): void },
    releaser?: (run: Run) => Promise<void>,
  ) {
    this.client = client;
    this.lease = lease;
    this.call = call;
    this.releaser = releaser; // a LeaseSet's run: released over the set's stream
    this.id = lease.runId;
    this._lastSeq = lease.lastSeq;
    this._lastHash = lease.lastHash;
    this._nextIteration = lease.state?.nextIteration || 1;
    this.pending = [...(lease.state?.pending?.unanswered ?? [])];
    this.closed = new Promise((r) => (this.resolveClosed = r));
    OPEN_RUNS.add(this.id);
  }

  /** @internal */
  _ended(e: LeaseEnded): void {
    this.endReason = e;
  }
  /** @internal */
  _failed(err: ServiceError): void {
    this.streamError = fromServiceError(err);
  }
  /** @internal */
  _closed(): void {
    this.isClosed = true;
    OPEN_RUNS.delete(this.id);
    this.resolveClosed();
  }

  /** The folded state at open time. */
  get state(): RunState | undefined {
    return this.lease.state;
  }
  /** Notices that came with the open, e.g. "open_tool_calls". */
  get warnings(): Warning[] {
    return this.lease.warnings;
  }
  get lastSeq(): number {
    return this._lastSeq;
  }
  get lastHash(): string {
    return this._lastHash;
  }
  get nextIteration(): number {
    return this._nextIteration;
  }
  /** Why the daemon ended the lease, if it did. */
  get ended(): LeaseEnded | undefined {
    return this.endReason;
  }
  /** The lease stream's failure, if it failed (not a close()). */
  get error(): unknown {
    return this.streamError;
  }

  /** The tool calls of the trailing assistant turn not yet answered. */
  unanswered(): ToolCall[] {
    return [...this.pending];
  }

  /**
   * Release the lease: close the open PipelinedWriter, if any (waiting for the appends in
   * flight), call Release (so the run can be opened again at once, by this
   * process or another), then cancel the Open stream and wait for it to finish. Release
   * errors are ignored: the daemon may be gone, and cancelling the stream releases the
   * lease too, only a moment later.
   */
  async close(): Promise<void> {
    await this._closeWriter();
    if (this.releaser) {
      if (!this.isClosed) await this.releaser(this);
      await this.closed;
      return;
    }
    if (!this.isClosed) await this.release();
    this.call.cancel();
    await this.closed;
  }

  /** @internal Close the open PipelinedWriter, if any, waiting for the appends in flight. */
  async _closeWriter(): Promise<void> {
    if (this.writer) await this.writer.close().catch(() => undefined);
  }

  private release(): Promise<void> {
    return new Promise((resolve) => {
      this.client.rpc.release(
        { runId: this.id, leaseId: this.lease.leaseId },
        new Metadata(),
        { deadline: new Date(Date.now() + RELEASE_TIMEOUT_MS) },
        (err: ServiceError | null) => {
          if (err?.code === Status.UNIMPLEMENTED) releaseUnsupported = true;
          resolve();
        },
      );
    });
  }

  /** The run's current folded state from the daemon. */
  fold(governed = false, opts?: CallOpts): Promise<FoldResponse> {
    return this.client.fold(this.id, governed, opts);
  }

  /** Journal a model call (before any tool runs); its tool_use blocks become pending. */
  appendAssistant(turn: AssistantTurn, opts?: CallOpts): Promise<Ack> {
    return this.appendEntry({ assistant: turn }, opts);
  }

  /** Journal one tool's result (with `asAttachment`, its content uploaded first). */
  async appendToolResult(r: ToolResultInput, opts?: CallOpts): Promise<Ack> {
    if (r.asAttachment) {
      const { data, mediaType } = resultAttachmentBytes(r.content);
      const put = await this.client.putAttachment(this.id, data, mediaType, r.toolUseId, opts);
      const block = parseJson(Buffer.from(put.blockJson).toString("utf8")) as Block;
      r = { ...r, content: [block], asAttachment: false };
    }
    return this.appendEntry({ toolResult: r }, opts);
  }

  /** Journal a free-standing interactive follow-up (only the new blocks). */
  appendUser(content: Block[], opts?: CallOpts): Promise<Ack> {
    return this.appendEntry({ user: content }, opts);
  }

  /** Journal the end of the run: completed, suspended, error, budget, max_iterations. */
  appendTerminal(reason: string, message = "", opts?: CallOpts): Promise<Ack> {
    return this.appendEntry({ terminal: { reason, message } }, opts);
  }

  /**
   * Journal one value of framework state under (namespace, key): opaque typed bytes that
   * the fold indexes (latest per key, in RunState.state) and that never join the
   * conversation, so it is accepted even while tool calls are open. A large value goes to
   * putAttachment first and is journaled with `sha256` and `size` through appendRaw.
   */
  appendState(
    namespace: string,
    key: string,
    type: string,
    data: Uint8Array,
    opts?: CallOpts,
  ): Promise<Ack> {
    return this.appendEntry({ state: { namespace, key, type, data } }, opts);
  }

  /** Journal the removal of a key of framework state (an empty key: the whole namespace). */
  deleteState(namespace: string, key = "", opts?: CallOpts): Promise<Ack> {
    return this.appendEntry({ state: { namespace, key, deleted: true } }, opts);
  }

  /** Journal a record built by the caller (seq and ts are filled when unset). */
  appendRaw(rec: Partial<JournalRecord>, opts?: CallOpts): Promise<Ack> {
    return this.appendEntry({ raw: rec }, opts);
  }

  /**
   * Journal one entry at lastSeq+1. Appends of one Run are serialized; while a
   * PipelinedWriter is open they go through it, and these methods refuse.
   */
  appendEntry(entry: Entry, opts?: CallOpts): Promise<Ack> {
    return this.serial(async () => {
      if (this.writer) throw writerOpen(this.id);
      const b = buildEntry(entry, this._nextIteration);
      const ack = await this.appendNow(this._record(b, this._lastSeq + 1, opts), opts);
      this._acked(b, ack);
      return ack;
    });
  }

  /**
   * Journal several entries as one append (one durable write, seqs lastSeq+1 on), all or
   * none: a refusal stores none of them. Resolves with one ack per entry.
   */
  appendMany(entries: Entry[], opts?: CallOpts): Promise<Ack[]> {
    return this.serial(async () => {
      if (this.writer) throw writerOpen(this.id);
      if (entries.length === 0) return [];
      const built: Built[] = [];
      let iteration = this._nextIteration;
      for (const e of entries) {
        const b = buildEntry(e, iteration);
        if (b.assistant) iteration = b.assistant.iteration + 1;
        built.push(b);
      }
      const records = built.map((b, i) => this._record(b, this._lastSeq + 1 + i, opts));
      const acks = await this.appendRecords(records, opts);
      built.forEach((b, i) => this._acked(b, acks[i]));
      return acks;
    });
  }

  /**
   * A writer that keeps up to `window` appends (default 16) in flight on one AppendStream
   * and hands each its acks (see PipelinedWriter). The Run's own append methods refuse
   * until it is closed; run.close() closes it first.
   */
  pipelined(options: PipelinedOptions = {}): PipelinedWriter {
    if (this.writer) throw writerOpen(this.id);
    this.writer = new PipelinedWriter(this, this.client, options);
    return this.writer;
  }

  /** @internal The record of a built entry at seq (unless it has its own), stamped now. */
  _record(b: Built, seq: number, opts?: CallOpts): JournalRecord {
    return JournalRecord.fromPartial({
      ...b.payload,
      seq: b.payload.seq || seq,
      ts: b.payload.ts || this.client.now(),
      trace: b.payload.trace ?? recordTrace(opts),
    });
  }

  /** @internal Move the Run's view past one acknowledged entry. */
  _acked(b: Built, ack: Ack): void {
    this._lastSeq = ack.seq;
    this._lastHash = ack.hash;
    if (b.assistant) {
      this._nextIteration = b.assistant.iteration + 1;
      this.pending = b.assistant.calls;
    }
    if (b.answers !== undefined) this.pending = this.pending.filter((c) => c.id !== b.answers);
  }

  /** @internal The writer is closed: appends go through the Run again. */
  _writerClosed(w: PipelinedWriter): void {
    if (this.writer === w) this.writer = undefined;
  }

  /**
   * Run only the calls of the pending turn that are still unanswered (as the daemon's
   * fold says) through `fn`, one after another, journaling each result as soon as it
   * completes. A call whose `fn` throws is journaled as an is_error result with the error
   * text, so every call is closed for real. Resolves with the acks in order.
   */
  async completePending(fn: ToolFn, opts?: CallOpts & { remote?: boolean }): Promise<Ack[]> {
    const folded = await this.fold(false, opts);
    const acks: Ack[] = [];
    for (const call of folded.state?.pending?.unanswered ?? []) {
      let content: Block[];
      let isError = false;
      try {
        const out = await fn(call);
        const body = typeof out === "string" || Array.isArray(out) ? out : out.content;
        isError = typeof out === "object" && !Array.isArray(out) ? (out.isError ?? false) : false;
        content = typeof body === "string" ? [text(body)] : body;
      } catch (err) {
        content = [text(err instanceof Error ? err.message : String(err))];
        isError = true;
      }
      acks.push(await this.appendToolResult({ toolUseId: call.id, content, isError, remote: opts?.remote }, opts));
    }
    return acks;
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Send one record, retried byte-identical while the daemon is unreachable (the daemon
   * answers a stored retry as a duplicate: the ts is the client's, set once). */
  private async appendNow(rec: JournalRecord, opts?: CallOpts): Promise<Ack> {
    return (await this.appendRecords([rec], opts))[0];
  }

  private async appendRecords(records: JournalRecord[], opts?: CallOpts): Promise<Ack[]> {
    const req = { runId: this.id, leaseId: this.lease.leaseId, records };
    for (let attempt = 0; ; attempt++) {
      try {
        const res: AppendResponse = await this.client.unary(this.client.rpc.append, req, opts);
        if (res.acks.length !== records.length) {
          throw new JournaldError(
            "internal",
            `append of seq ${records[0].seq} (${records.length} records) answered with ${res.acks.length} acks`,
          );
        }
        return res.acks;
      } catch (err) {
        if (!retryInPlace(err, attempt)) throw err;
        await sleep(100 * (attempt + 1));
      }
    }
  }
}

function writerOpen(runId: string): Error {
  return new InvalidRequestError(
    "invalid_request",
    `run ${runId}: a pipelined writer is open on this run; append through it, or close it first (two writers would number the same seqs)`,
    { metadata: { run_id: runId } },
  );
}
