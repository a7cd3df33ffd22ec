export * from "./canonical";
export * from "./client";
export * from "./entry";
export * from "./lease_set";
export type { ListChange, ListChangesOptions } from "./list_changes";
export * from "./pipelined";
export * from "./errors";
export * from "./fingerprint";
export * from "./otel";
export * from "./socket";
export * from "./window";
export * as pb from "./gen/journald/v1/journal";
export type {
  Ack,
  Fingerprint,
  FoldResponse,
  Lease,
  LeaseEnded,
  Message,
  PendingTurn,
  Record as JournalRecord,
  RunState,
  ToolCall,
  VerifyResponse,
  Warning,
} from "./gen/journald/v1/journal";
