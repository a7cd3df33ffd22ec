/**
 * `client.listChanges()`: notices naming the runs whose listing rows changed, so a live
 * listing Lists again only when something moved instead of polling
 * (docs/protocol.md#list-changes).
 */
import { Metadata, status as Status } from "@grpc/grpc-js";
import { fromServiceError } from "./errors";
import { JournalServiceClient, ListChangesResponse } from "./gen/journald/v1/journal";
import { traceMetadata } from "./otel";

/**
 * One notice. `ready`: the first one, the stream is live (List now: that listing misses
 * nothing). Else `runIds`: the runs whose RunInfo may differ from the last List (sorted);
 * `all`: too many (or unknown) runs changed, List everything again.
 */
export interface ListChange {
  ready: boolean;
  runIds: string[];
  all: boolean;
}

export interface ListChangesOptions {
  /** Abort to stop following: the iteration then ends without an error. */
  signal?: AbortSignal;
  /** The OpenTelemetry Context to propagate (default: the active one). */
  otelContext?: unknown;
}

/**
 * The notices of one ListChanges stream, the ready one first. The iteration ends when the
 * signal aborts, the loop breaks, or the daemon stops (List again after reconnecting); a
 * failure is thrown typed (a daemon older than ListChanges: a JournaldError with code
 * `unimplemented`, poll `list()` then).
 */
export async function* listChanges(rpc: JournalServiceClient, opts: ListChangesOptions = {}): AsyncGenerator<ListChange> {
  const { signal } = opts;
  if (signal?.aborted) return;
  const md: Metadata = traceMetadata(opts.otelContext);
  const call = rpc.listChanges({}, md);
  const stop = () => call.cancel();
  signal?.addEventListener("abort", stop, { once: true });
  try {
    for await (const m of call as AsyncIterable<ListChangesResponse>) {
      yield { ready: m.ready, runIds: [...m.runIds], all: m.all };
    }
  } catch (err) {
    if ((err as { code?: unknown }).code === Status.CANCELLED) return;
    throw fromServiceError(err);
  } finally {
    signal?.removeEventListener("abort", stop);
    call.cancel();
  }
}
