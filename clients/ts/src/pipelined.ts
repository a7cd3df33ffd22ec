/**
 * The pipelined writer: appends sent on one AppendStream without waiting for each answer,
 * so the daemon can commit several in one durable write, each handed its own acks.
 *
 * The ordering rules (docs/protocol.md#pipelined-writers): seqs are assigned in the order
 * `append` is called; the daemon answers in order. When an append fails, the daemon ends the
 * stream after it: that append's acks reject with the daemon's typed error, every append
 * sent behind it rejects with NotWrittenError (their seqs are void), the writer's next seq
 * goes back to the last acknowledged one + 1, and the failure is thrown once more by the next
 * `append` or `flush`, so a caller that never awaits the acks still sees it. A stream that
 * breaks with a bare UNAVAILABLE is opened again and the unanswered appends are re-sent with
 * their original bytes (twice at most, like a unary append): the daemon answers the ones it
 * had stored as duplicates and stores the rest, so nothing is stored twice.
 */
import type { ClientDuplexStream, ServiceError } from "@grpc/grpc-js";
import type { CallOpts, Client, Run } from "./client";
import { buildEntry, Built, Entry } from "./entry";
import {
  fromServiceError,
  InternalError,
  InvalidRequestError,
  LeaseLostError,
  retryInPlace,
  TransportError,
} from "./errors";
import {
  Ack,
  AppendRequest,
  AppendStreamRequest,
  AppendStreamResponse,
  Record as JournalRecord,
} from "./gen/journald/v1/journal";
import { streamMessages } from "./coalesce";
import { traceMetadata } from "./otel";

/** How many appends a writer keeps in flight unless told otherwise. */
export const DEFAULT_WINDOW = 16;

export interface PipelinedOptions {
  /** Appends in flight at most (default DEFAULT_WINDOW); `append` waits while it is full. */
  window?: number;
  /** The OpenTelemetry Context whose trace the stream carries (default: the active one). */
  otelContext?: unknown;
}

/** Per-append options: the span whose ids the records carry. */
export type AppendOpts = Pick<CallOpts, "otelContext">;

/**
 * The error of an append that was voided because an append before it on the same writer
 * failed: nothing of it was written. `cause` is that failure.
 */
export class NotWrittenError extends Error {
  /** The first seq of the voided append. */
  readonly seq: number;
  /** The first seq of the append that failed. */
  readonly failedSeq: number;

  constructor(seq: number, failedSeq: number, cause: unknown) {
    super(`seq ${seq} was not written: it was sent behind seq ${failedSeq}, which failed: ${String(cause)}`, {
      cause,
    });
    this.name = "NotWrittenError";
    this.seq = seq;
    this.failedSeq = failedSeq;
  }
}

/** One append submitted to a PipelinedWriter. */
export interface Pending {
  /** The seq of its first record. */
  readonly seq: number;
  /** Its acks, one per entry, once its records are durable; rejects with its failure. */
  readonly acks: Promise<Ack[]>;
  /** The ack of its last record (for `append`, its only one). */
  readonly ack: Promise<Ack>;
}

interface InFlight {
  seq: number;
  built: Built[];
  req: AppendRequest;
  settled: Promise<unknown>;
  resolve: (acks: Ack[]) => void;
  reject: (err: unknown) => void;
}

interface Pipe {
  call: ClientDuplexStream<AppendStreamRequest, AppendStreamResponse>;
  /** How many times the appends it carries were re-sent in a row. */
  attempt: number;
  /** The stream's failure, acted on at its end (after every answer before it). */
  error?: unknown;
  /** A message is being written: what is submitted meanwhile waits in the outbox. */
  writing: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Keeps up to a window of appends in flight on one run (`run.pipelined()`). While it is
 * open, the Run's own append methods refuse (seqs would clash).
 */
export class PipelinedWriter {
  readonly window: number;
  private readonly run: Run;
  private readonly client: Client;
  private readonly otelContext: unknown;
  private pipe: Pipe | undefined;
  /** Appends sent and not yet answered, in seq order. */
  private inflight: InFlight[] = [];
  /** The appends of `inflight` not yet written to the stream, in seq order. */
  private outbox: AppendRequest[] = [];
  private nextSeq: number;
  private nextIteration: number;
  /** The failure the next append or flush throws (once). */
  private failure: { err: unknown } | undefined;
  private isClosed = false;
  /** Submissions, in call order. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Settles once a broken stream's appends are re-sent on a new one. */
  private reconnecting: Promise<void> = Promise.resolve();
  /** Submissions waiting for a free slot. */
  private waiting: (() => void)[] = [];

  /** @internal Use run.pipelined(). */
  constructor(run: Run, client: Client, options: PipelinedOptions) {
    const window = options.window ?? DEFAULT_WINDOW;
    if (!Number.isInteger(window) || window < 1) {
      throw new InvalidRequestError("invalid_request", `a pipelined writer needs a window of at least 1 append, not ${window}`);
    }
    this.window = window;
    this.run = run;
    this.client = client;
    this.otelContext = options.otelContext;
    this.nextSeq = run.lastSeq + 1;
    this.nextIteration = run.nextIteration;
  }

  /**
   * Submit one entry. Resolves as soon as it is sent (it waits only while `window` appends
   * are in flight) with a Pending whose `ack` settles once the record is durable. Rejects
   * with the failure of an earlier append that no append or flush has thrown yet, without
   * sending anything.
   */
  append(entry: Entry, opts?: AppendOpts): Promise<Pending> {
    return this.appendMany([entry], opts);
  }

  /** Submit entries as one append (one durable write, consecutive seqs); see append. */
  appendMany(entries: Entry[], opts?: AppendOpts): Promise<Pending> {
    const next = this.queue.then(() => this.submit(entries, opts));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /**
   * Wait until every append submitted before it is answered; throws the failure of an
   * append that no append or flush has thrown yet.
   */
  async flush(): Promise<void> {
    await this.queue;
    await this.inflight[this.inflight.length - 1]?.settled;
    const failure = this.failure;
    this.failure = undefined;
    if (failure) throw failure.err;
  }

  /** Flush, end the stream and hand appends back to the Run; throws what flush threw. */
  async close(): Promise<void> {
    if (this.isClosed) return;
    let failure: { err: unknown } | undefined;
    try {
      await this.flush();
    } catch (err) {
      failure = { err };
    }
    this.isClosed = true;
    if (this.inflight.length > 0) this.fail(closedError(this.run.id)); // submitted while flushing
    const pipe = this.pipe;
    this.pipe = undefined;
    if (pipe) {
      pipe.call.end();
      pipe.call.cancel();
    }
    this.wake();
    this.run._writerClosed(this);
    if (failure) throw failure.err;
  }

  private async submit(entries: Entry[], opts?: AppendOpts): Promise<Pending> {
    if (entries.length === 0) throw new InvalidRequestError("invalid_request", "an append needs at least one entry");
    while (this.inflight.length >= this.window && !this.isClosed) {
      await new Promise<void>((r) => this.waiting.push(r));
    }
    await this.reconnecting;
    // From here to the write nothing awaits: no answer is handled in between.
    if (this.isClosed) throw closedError(this.run.id);
    const failure = this.failure;
    this.failure = undefined;
    if (failure) throw failure.err;
    let seq = this.nextSeq;
    let iteration = this.nextIteration;
    const built: Built[] = [];
    const records: JournalRecord[] = [];
    for (const e of entries) {
      const b = buildEntry(e, iteration);
      const rec = this.run._record(b, seq, opts);
      if (b.assistant) iteration = b.assistant.iteration + 1;
      seq = rec.seq + 1;
      built.push(b);
      records.push(rec);
    }
    if (!this.pipe) this.open(0);
    const req = { runId: this.run.id, leaseId: this.run.lease.leaseId, records };
    let resolve!: (acks: Ack[]) => void;
    let reject!: (err: unknown) => void;
    const acks = new Promise<Ack[]>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const ack = acks.then((a) => a[a.length - 1]);
    // a caller who never awaits them must not see an unhandled rejection
    const settled = acks.catch(() => undefined);
    ack.catch(() => undefined);
    this.inflight.push({ seq: records[0].seq, built, req, settled, resolve, reject });
    this.nextSeq = seq;
    this.nextIteration = iteration;
    this.outbox.push(req);
    this.sendQueued();
    return { seq: records[0].seq, acks, ack };
  }

  /**
   * Write the outbox as one message (or, to a daemon without batches, one per append) unless
   * a message is being written: then what is queued goes when its write completes. Nothing
   * waits for company: an append that finds the stream idle is written at once.
   */
  private sendQueued(): void {
    const pipe = this.pipe;
    if (!pipe || pipe.writing || this.outbox.length === 0) return;
    const messages = streamMessages(this.outbox, this.run.lease.appendStreamBatches);
    this.outbox = [];
    pipe.writing = true;
    let left = messages.length;
    const written = () => {
      if (--left > 0) return;
      pipe.writing = false;
      this.sendQueued();
    };
    for (const m of messages) pipe.call.write(m, written);
  }

  private open(attempt: number): Pipe {
    const call = this.client.rpc.appendStream(traceMetadata(this.otelContext));
    const pipe: Pipe = { call, attempt, writing: false };
    this.pipe = pipe;
    call.on("data", (m: AppendStreamResponse) => {
      const answers = m.responses.length > 0 ? m.responses : [m.response];
      for (const a of answers) if (this.pipe === pipe) this.acked(pipe, a?.acks ?? []);
    });
    call.on("error", (err: ServiceError) => {
      pipe.error ??= fromServiceError(err);
    });
    // 'end' comes after every answer the daemon sent before failing: act on the failure then
    const end = () =>
      this.ended(
        pipe,
        pipe.error ??
          new TransportError(
            "unavailable",
            `the daemon ended the append stream of run ${this.run.id} before answering every append`,
          ),
      );
    call.on("end", end);
    call.on("close", end);
    return pipe;
  }

  /** Settle the oldest append in flight with its acks and move the Run's view past it. */
  private acked(pipe: Pipe, acks: Ack[]): void {
    if (this.pipe !== pipe) return;
    const head = this.inflight[0];
    if (!head || acks.length !== head.built.length) {
      const what = head ? `append of seq ${head.seq} answered with ${acks.length} acks` : "an unsent append answered";
      const bug = new InternalError("internal", `run ${this.run.id}: ${what}; this is a daemon bug`);
      this.pipe = undefined;
      pipe.call.cancel();
      if (head) this.fail(bug);
      return;
    }
    this.inflight.shift();
    head.built.forEach((b, i) => this.run._acked(b, acks[i]));
    pipe.attempt = 0;
    head.resolve(acks);
    this.wake();
  }

  /**
   * The stream ended: with nothing in flight, nothing to do (the next append opens a new
   * one); after a bare UNAVAILABLE, re-send what is in flight on a new stream; else fail
   * the oldest append in flight and void the rest.
   */
  private ended(pipe: Pipe, err: unknown): void {
    if (this.pipe !== pipe) return;
    this.pipe = undefined;
    if (this.inflight.length === 0) return;
    if (!this.isClosed && retryInPlace(err, pipe.attempt)) {
      this.reconnecting = (async () => {
        await sleep(100 * (pipe.attempt + 1));
        if (this.inflight.length === 0) return;
        if (this.isClosed) return this.fail(err);
        this.open(pipe.attempt + 1);
        this.outbox = this.inflight.map((f) => f.req); // all again, in order, on the new stream
        this.sendQueued();
      })();
      return;
    }
    this.fail(err);
  }

  /** Fail the oldest append in flight, void the rest, keep the failure for the next append
   * or flush, and resync the next seq to the last acknowledged one. */
  private fail(err: unknown): void {
    const [head, ...rest] = this.inflight;
    this.inflight = [];
    this.outbox = [];
    head.reject(err);
    for (const f of rest) f.reject(new NotWrittenError(f.seq, head.seq, err));
    this.failure ??= { err };
    this.nextSeq = this.run.lastSeq + 1;
    this.nextIteration = this.run.nextIteration;
    this.wake();
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = [];
    for (const w of waiting) w();
  }
}

function closedError(runId: string): Error {
  return new LeaseLostError("lease_lost", `run ${runId}: this pipelined writer is closed; open a new one with run.pipelined()`);
}
