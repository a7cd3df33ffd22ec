/**
 * Typed errors (docs/protocol.md#errors). Every failed call carries a gRPC status plus a
 * `journald-error-bin` trailer (a serialized journald.v1.ErrorDetail); the code in it picks
 * the class. Without the trailer the class comes from the gRPC status alone.
 */
import { Metadata, status as Status } from "@grpc/grpc-js";
import { ErrorDetail } from "./gen/journald/v1/journal";

export const ERROR_TRAILER = "journald-error-bin";

/** Base of every journald failure. */
export class JournaldError extends Error {
  /** Machine code, e.g. "locked" (for errors without a trailer: the snake_case status). */
  readonly code: string;
  /** The gRPC status code of the call. */
  readonly grpcCode: number;
  /** Structured facts, e.g. run_id, seq, holder_pid. */
  readonly metadata: Record<string, string>;
  /** Per-field drift lines for fingerprint_drift, e.g. "model: a -> b". */
  readonly diff: string[];

  constructor(
    code: string,
    message: string,
    opts: { grpcCode?: number; metadata?: Record<string, string>; diff?: string[]; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = code;
    this.grpcCode = opts.grpcCode ?? Status.UNKNOWN;
    this.metadata = opts.metadata ?? {};
    this.diff = opts.diff ?? [];
  }

  override toString(): string {
    return `${this.name}: ${this.code}: ${this.message}`;
  }
}

export class NotFoundError extends JournaldError {}
export class SessionNotFoundError extends NotFoundError {}
export class CheckpointNotFoundError extends NotFoundError {}
export class AttachmentNotFoundError extends NotFoundError {}
export class SessionExistsError extends JournaldError {}
export class InvalidArgumentError extends JournaldError {}
export class InvalidIdError extends InvalidArgumentError {}
export class InvalidRecordError extends InvalidArgumentError {}
export class VersionUnsupportedError extends InvalidArgumentError {}
export class SessionMismatchError extends InvalidArgumentError {}
export class CheckpointImportInvalidError extends InvalidArgumentError {}
/** Undecodable request bytes, or a field over its size limit (`metadata.field`). */
export class InvalidRequestError extends InvalidArgumentError {}
export class InvalidCheckpointIdError extends InvalidArgumentError {}
export class InvalidDigestError extends InvalidArgumentError {}
export class SeqError extends JournaldError {}
export class SeqGapError extends SeqError {}
export class SeqConflictError extends SeqError {}
export class LeaseError extends JournaldError {}
export class LockedError extends LeaseError {}
export class LeaseLostError extends LeaseError {}
export class GateError extends JournaldError {}
export class CompletedError extends GateError {}
export class InteractivityMismatchError extends GateError {}
export class ProviderChangedError extends GateError {}
export class FingerprintDriftError extends GateError {}
export class TurnRunningError extends JournaldError {}
export class StoreCorruptedError extends JournaldError {}
export class BackendUnavailableError extends JournaldError {}
export class StorageFullError extends JournaldError {}
/** A daemon bug (code "internal"): the journal is unchanged unless an ack was sent. */
export class InternalError extends JournaldError {}
/** The answer exceeds the daemon's max message size: ask for less (pages, from a seq). */
export class ResponseTooLargeError extends JournaldError {}
/** The daemon's backend cannot do this operation (e.g. recovery on JetStream). */
export class UnsupportedError extends JournaldError {}
/** The run belongs to another uid of a shared daemon (metadata owner_uid, peer_uid). */
export class PermissionDeniedError extends JournaldError {}
/**
 * Raised by the client itself before it dials: the socket (or its directory) is not owned by
 * the expected daemon uid, is a symbolic link, or its directory is writable by others
 * (metadata socket, path, found_uid, expected_uid). Code "permission_denied".
 */
export class UntrustedSocketError extends PermissionDeniedError {}
/**
 * A per-peer limit of the daemon was reached (metadata `limit`, and `flag`, the option that
 * raises it): release what you hold before retrying, never in a tight loop.
 */
export class ResourceExhaustedError extends JournaldError {}
/** A failure without a journald code (transport errors, daemon down, ...). */
export class TransportError extends JournaldError {}

type ErrorClass = new (
  code: string,
  message: string,
  opts?: { grpcCode?: number; metadata?: Record<string, string>; diff?: string[]; cause?: unknown },
) => JournaldError;

/**
 * Every typed error class by machine code: the words of the proto's ErrorCode enum
 * (tests/unit/docs/test_contract_enums.py keeps this table equal to it).
 */
export const ERRORS_BY_CODE: Readonly<Record<string, ErrorClass>> = {
  session_not_found: SessionNotFoundError,
  checkpoint_not_found: CheckpointNotFoundError,
  attachment_not_found: AttachmentNotFoundError,
  session_exists: SessionExistsError,
  invalid_id: InvalidIdError,
  invalid_record: InvalidRecordError,
  version_unsupported: VersionUnsupportedError,
  session_mismatch: SessionMismatchError,
  checkpoint_import_invalid: CheckpointImportInvalidError,
  invalid_checkpoint_id: InvalidCheckpointIdError,
  invalid_digest: InvalidDigestError,
  invalid_request: InvalidRequestError,
  seq_gap: SeqGapError,
  seq_conflict: SeqConflictError,
  locked: LockedError,
  lease_lost: LeaseLostError,
  completed: CompletedError,
  interactivity_mismatch: InteractivityMismatchError,
  provider_changed: ProviderChangedError,
  fingerprint_drift: FingerprintDriftError,
  turn_running: TurnRunningError,
  store_corrupted: StoreCorruptedError,
  backend_unavailable: BackendUnavailableError,
  storage_full: StorageFullError,
  internal: InternalError,
  response_too_large: ResponseTooLargeError,
  unsupported: UnsupportedError,
  permission_denied: PermissionDeniedError,
  resource_exhausted: ResourceExhaustedError,
};

/** Rebuild a typed error from its wire form (unknown codes become JournaldError). */
export function fromCode(
  code: string,
  message: string,
  opts: { grpcCode?: number; metadata?: Record<string, string>; diff?: string[]; cause?: unknown } = {},
): JournaldError {
  const cls = ERRORS_BY_CODE[code] ?? JournaldError;
  return new cls(code, message, opts);
}

const STATUS_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(Status)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [v as number, k.toLowerCase()]),
);

/** Turn a grpc-js ServiceError (status + trailing metadata) into a typed error. */
export function fromServiceError(err: unknown): unknown {
  const e = err as { code?: unknown; details?: unknown; metadata?: unknown; message?: unknown };
  if (!e || typeof e.code !== "number") return err;
  const grpcCode = e.code;
  if (grpcCode === Status.CANCELLED) return err;
  const details = typeof e.details === "string" ? e.details : String(e.message ?? "");
  if (e.metadata instanceof Metadata) {
    for (const raw of e.metadata.get(ERROR_TRAILER)) {
      if (typeof raw === "string") continue;
      try {
        const d = ErrorDetail.decode(raw);
        if (d.code) {
          return fromCode(d.code, d.message, { grpcCode, metadata: d.metadata, diff: d.diff, cause: err });
        }
      } catch {
        // A malformed trailer falls through to the status.
      }
    }
  }
  if (grpcCode === Status.INTERNAL || grpcCode === Status.UNKNOWN) return transportFailure(grpcCode, details, err);
  return new TransportError(STATUS_NAMES[grpcCode] ?? "unknown", details, { grpcCode, cause: err });
}

/**
 * A bare INTERNAL or UNKNOWN is gRPC's own status (a stream reset, a connection broken
 * mid-call), never the daemon's: its edge puts the trailer on every status it sends, its own
 * `internal` included. The call may or may not have reached the daemon, as after a bare
 * UNAVAILABLE, so it becomes one and the writers resend the same seqs. Other bare statuses
 * (RESOURCE_EXHAUSTED for a request over the cap) would come back the same on a retry.
 */
function transportFailure(grpcCode: number, details: string, cause: unknown): TransportError {
  const name = (STATUS_NAMES[grpcCode] ?? "unknown").toUpperCase();
  return new TransportError(
    "unavailable",
    `the connection to the journald daemon failed (gRPC ${name} without journald's error trailer: ${details}); ` +
      "the call may not have reached the daemon: retry it (the writers do), and if it keeps failing check the daemon's log",
    { grpcCode: Status.UNAVAILABLE, metadata: { grpc_status: name }, cause },
  );
}

/** How often an append that met a bare UNAVAILABLE is sent again. */
export const MAX_RETRIES = 2;

/**
 * Whether an append failure is worth resending unchanged: the daemon was unreachable (a
 * bare UNAVAILABLE, not the backend's `backend_unavailable`), at most MAX_RETRIES times.
 * The daemon answers a resent record it had stored as a duplicate.
 */
export function retryInPlace(err: unknown, attempt: number): boolean {
  return attempt < MAX_RETRIES && err instanceof JournaldError && err.code === "unavailable";
}
