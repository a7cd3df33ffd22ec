/**
 * Many runs' writer leases over one `Leases` stream (docs/protocol.md#many-leases-on-one-stream).
 *
 *     const set = client.leaseSet();
 *     const runs = await Promise.all(ids.map((runId) => set.resume({ runId, fingerprint })));
 *     await runs[3].appendUser([text("hi")]); // a Run like any other
 *     await runs[3].close();                   // released over the set's stream
 *     await set.close();                       // every lease of the set ends at once
 *
 * A process that holds many runs at once (a server with a conversation per request, an agent
 * pool) would hold one `Open` stream per run with `client.start` / `resume`; a LeaseSet holds
 * them all over one. Its `start`, `startOrResume` and `resume` take the client's options and
 * meet the same gates and typed refusals; only the way the lease is held differs. When the
 * daemon ends one lease, that run's `closed` settles (its `ended` says why) and the others go
 * on; when the stream itself breaks (the daemon restarts), every lease of the set ends with it
 * and the next acquire opens a new stream. A lost lease is not re-acquired for you: open the
 * run again.
 */

import { ClientDuplexStream, Metadata, ServiceError } from "@grpc/grpc-js";
import { Client, ResumeOptions, Run, StartOptions } from "./client";
import { fromCode, fromServiceError, JournaldError } from "./errors";
import { LeasesRequest, LeasesResponse, OpenMode, OpenRequest } from "./gen/journald/v1/journal";
import { traceMetadata } from "./otel";
import { completeState } from "./window";

/** How long `close()` waits for the daemon to release every lease of the set. */
export const LEASE_SET_CLOSE_TIMEOUT_MS = 30_000;
/** How long `run.close()` waits for the release of one lease over the stream. */
const RELEASE_TIMEOUT_MS = 2000;

function leaseLost(message: string): JournaldError {
  return fromCode("lease_lost", message);
}

interface Waiter {
  resolve(answer: { resp: LeasesResponse; run?: Run }): void;
  reject(err: unknown): void;
}

/** One `Leases` call: answers are routed to the request they answer or the lease they end. */
class LeaseStream {
  private readonly call: ClientDuplexStream<LeasesRequest, LeasesResponse>;
  private nextId = 1;
  private readonly waiting = new Map<number, Waiter>();
  private readonly leases = new Map<string, Run>();
  failure: unknown;
  /** Settles once the stream has ended (finished, failed or cancelled). */
  readonly finished: Promise<void>;

  constructor(private readonly client: Client, metadata: Metadata) {
    this.call = client.rpc.leases(metadata);
    let done!: () => void;
    this.finished = new Promise((r) => (done = r));
    let error: unknown;
    this.call.on("data", (resp: LeasesResponse) => this.route(resp));
    this.call.on("error", (err: ServiceError) => (error = fromServiceError(err)));
    this.call.on("close", () => {
      this.failure =
        error ?? leaseLost("the daemon finished the Leases stream (it is shutting down); every lease on it ended");
      const waiting = [...this.waiting.values()];
      const leases = [...this.leases.values()];
      this.waiting.clear();
      this.leases.clear();
      for (const run of leases) {
        run._ended({ reason: "stream_closed", message: "" });
        run._closed();
      }
      for (const w of waiting) w.reject(this.failure);
      done();
    });
  }

  get broken(): boolean {
    return this.failure !== undefined;
  }

  ask(op: Omit<LeasesRequest, "requestId">): Promise<{ resp: LeasesResponse; run?: Run }> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const requestId = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(requestId, { resolve, reject });
      this.call.write({ requestId, ...op });
    });
  }

  private route(resp: LeasesResponse): void {
    if (resp.ended) {
      const run = this.leases.get(resp.runId);
      this.leases.delete(resp.runId);
      run?._ended(resp.ended);
      run?._closed();
      return;
    }
    const waiter = this.waiting.get(resp.requestId);
    this.waiting.delete(resp.requestId);
    let run: Run | undefined;
    if (resp.lease) {
      // made here, before an `ended` right behind the grant can be read
      run = new Run(this.client, resp.lease, { cancel: () => undefined }, (r) => this.release(r));
      this.leases.set(resp.runId, run);
    } else if (resp.released) {
      const gone = this.leases.get(resp.runId);
      this.leases.delete(resp.runId);
      gone?._ended({ reason: "released", message: "" });
      gone?._closed();
    }
    waiter?.resolve({ resp, run });
  }

  /** Release one lease over the stream (bounded; it ends with the stream at the latest). */
  async release(run: Run): Promise<void> {
    if (this.failure === undefined) {
      const asked = this.ask({ release: { runId: run.id, leaseId: run.lease.leaseId } }).catch(() => undefined);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((r) => (timer = setTimeout(r, RELEASE_TIMEOUT_MS)));
      await Promise.race([asked, late]);
      clearTimeout(timer);
    }
    if (this.leases.get(run.id) === run) this.leases.delete(run.id);
    run._ended(run.ended ?? { reason: "released", message: "" });
    run._closed();
  }

  /** Half-close: the daemon releases every lease on the stream, then finishes it. */
  async finish(timeoutMs: number): Promise<void> {
    this.call.end();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeoutMs)));
    const cut = await Promise.race([this.finished.then(() => false), late]);
    clearTimeout(timer);
    if (cut) {
      this.call.cancel();
      await this.finished;
    }
  }
}

/** Runs of one Client whose leases share one `Leases` stream (module doc). */
export class LeaseSet {
  private stream: LeaseStream | undefined;
  private held = new Set<Run>();
  private isClosed = false;

  /** @internal Use `client.leaseSet()`. */
  constructor(private readonly client: Client) {}

  /** `client.start` over the set's stream. */
  start(o: StartOptions): Promise<Run> {
    return this.acquire(this.client.openRequest(o, OpenMode.OPEN_MODE_CREATE), o);
  }

  /** `client.startOrResume` over the set's stream. */
  startOrResume(o: StartOptions): Promise<Run> {
    return this.acquire(this.client.openRequest(o, OpenMode.OPEN_MODE_CREATE_OR_RESUME), o);
  }

  /** `client.resume` over the set's stream. */
  resume(o: ResumeOptions): Promise<Run> {
    return this.acquire(this.client.resumeRequest(o), o);
  }

  /** The runs of the set whose lease is still held. */
  get runs(): Run[] {
    return [...this.held].filter((r) => r.ended === undefined);
  }

  private current(o: StartOptions | ResumeOptions): LeaseStream {
    if (this.isClosed) throw leaseLost("this lease set is closed; open the runs with a new one");
    if (this.stream === undefined || this.stream.broken) {
      this.stream = new LeaseStream(this.client, traceMetadata(o.otelContext));
    }
    return this.stream;
  }

  private async acquire(req: OpenRequest, o: StartOptions | ResumeOptions): Promise<Run> {
    req.client = this.client.clientInfo();
    const { resp, run } = await this.current(o).ask({ acquire: req });
    if (resp.refused) {
      const d = resp.refused;
      throw fromCode(d.code, d.message, { metadata: d.metadata, diff: d.diff });
    }
    if (!run) throw new JournaldError("internal", `the Leases stream answered the acquire of ${req.runId} without a lease`);
    if (run.ended !== undefined) throw leaseLost(`the lease of run ${req.runId} ended as it was granted; open it again`);
    try {
      await completeState(this.client, req.runId, run.lease.state, o);
    } catch (err) {
      await run.close();
      throw err;
    }
    this.held.add(run);
    void run.closed.then(() => this.held.delete(run));
    return run;
  }

  /**
   * End every lease of the set at once and resolve when each run can be opened again (at
   * most `timeoutMs`; the stream is cancelled then, which ends them too).
   */
  async close(timeoutMs = LEASE_SET_CLOSE_TIMEOUT_MS): Promise<void> {
    if (this.isClosed) return;
    this.isClosed = true;
    const stream = this.stream;
    this.stream = undefined;
    await Promise.all([...this.held].map((r) => r._closeWriter()));
    if (stream) await stream.finish(timeoutMs);
  }
}
