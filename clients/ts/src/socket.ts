import * as path from "node:path";

/**
 * The daemon's default socket path: $JOURNALD_SOCKET if set; else
 * $XDG_RUNTIME_DIR/journald/journald.sock if XDG_RUNTIME_DIR is set; else
 * <tmpdir>/journald-<uid>/journald.sock, where tmpdir is $TMPDIR or /tmp.
 */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.JOURNALD_SOCKET) return env.JOURNALD_SOCKET;
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, "journald", "journald.sock");
  const tmp = env.TMPDIR || "/tmp";
  const uid = typeof process.getuid === "function" ? process.getuid() : 0;
  return path.join(tmp, `journald-${uid}`, "journald.sock");
}

/** The gRPC target of a socket path: unix:///abs/path (grpc-js dials it natively). */
export function target(socketPath: string): string {
  return `unix://${path.resolve(socketPath)}`;
}
