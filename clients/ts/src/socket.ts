import * as fs from "node:fs";
import * as path from "node:path";
import { status as Status } from "@grpc/grpc-js";
import { UntrustedSocketError } from "./errors";

/** Names the uid (or user name) the daemon is expected to run as. */
export const DAEMON_UID_ENV = "JOURNALD_DAEMON_UID";

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

function uidOfUser(name: string): number | undefined {
  // Node has no getpwnam: /etc/passwd names the local users (name:x:uid:...)
  let text: string;
  try {
    text = fs.readFileSync("/etc/passwd", "utf8");
  } catch {
    return undefined;
  }
  for (const line of text.split("\n")) {
    const f = line.split(":");
    if (f[0] === name && f.length > 2 && /^\d+$/.test(f[2])) return Number(f[2]);
  }
  return undefined;
}

/**
 * The uid a socket must belong to: `explicit` if given, else $JOURNALD_DAEMON_UID (a uid or a
 * user name of /etc/passwd), else this process's uid.
 */
export function expectedDaemonUid(explicit?: number | string, env: NodeJS.ProcessEnv = process.env): number {
  const v = String(explicit ?? env[DAEMON_UID_ENV] ?? "").trim();
  if (v === "") return typeof process.geteuid === "function" ? process.geteuid() : 0;
  if (/^\d+$/.test(v)) return Number(v);
  const uid = uidOfUser(v);
  if (uid === undefined) {
    throw new UntrustedSocketError(
      "permission_denied",
      `the expected daemon user "${v}" (${DAEMON_UID_ENV} or daemonUid) does not exist on this host; ` +
        "set it to the uid or user name the daemon runs as",
      { grpcCode: Status.PERMISSION_DENIED, metadata: { expected_uid: v } },
    );
  }
  return uid;
}

function untrusted(socket: string, p: string, what: string, found: number, expected: number): UntrustedSocketError {
  return new UntrustedSocketError(
    "permission_denied",
    `refusing to dial ${socket}: ${what}, so it may belong to someone waiting for your calls ` +
      `(found uid ${found}, expected the daemon's uid ${expected} or root). If you started the daemon ` +
      `yourself, stop whatever holds ${p} (as root: remove it) and start the daemon again; if the daemon ` +
      `runs as another user, set ${DAEMON_UID_ENV} to that user (or pass daemonUid)`,
    {
      grpcCode: Status.PERMISSION_DENIED,
      metadata: { socket, path: p, found_uid: String(found), expected_uid: String(expected) },
    },
  );
}

/**
 * Refuse (UntrustedSocketError) a socket that the expected daemon uid (or root) did not put in
 * a directory only it may write: the socket and its directory must each belong to that uid or
 * root, neither may be a symbolic link, and the directory may not be writable by its group or
 * others unless it is sticky (/tmp). A socket missing or out of reach passes (dialing it fails the same way). Nothing is
 * sent anywhere.
 */
export function checkSocket(socketPath: string, daemonUid?: number | string): void {
  const expected = expectedDaemonUid(daemonUid);
  const abs = path.resolve(socketPath);
  for (const [p, isDir] of [
    [path.dirname(abs), true],
    [abs, false],
  ] as const) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "EACCES") return; // dialing fails the same way
      throw untrusted(socketPath, p, `${p} cannot be examined (${String(err)})`, -1, expected);
    }
    if (st.isSymbolicLink()) throw untrusted(socketPath, p, `${p} is a symbolic link`, st.uid, expected);
    if (st.uid !== expected && st.uid !== 0) {
      const what = isDir ? `its directory ${p}` : `the socket ${p}`;
      throw untrusted(socketPath, p, `${what} belongs to another user`, st.uid, expected);
    }
    // a sticky directory (/tmp) lets no one replace a socket that is not theirs: the socket's
    // own owner, checked next, then says who put it there
    if (isDir && (st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0) {
      const mode = (st.mode & 0o7777).toString(8).padStart(4, "0");
      throw untrusted(
        socketPath,
        p,
        `its directory ${p} is writable by others (mode ${mode}), who could replace the socket`,
        st.uid,
        expected,
      );
    }
  }
}
