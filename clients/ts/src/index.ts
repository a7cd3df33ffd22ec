export * from "./canonical";
export * from "./client";
export * from "./errors";
export * from "./fingerprint";
export * from "./otel";
export * from "./socket";
export * as pb from "./gen/journald/v1/journal";
