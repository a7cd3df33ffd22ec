import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { checkSocket, Client, defaultSocketPath, PermissionDeniedError, UntrustedSocketError } from "../src";

const NOBODY = 65534;
const TMP = os.tmpdir(); // before the tests point TMPDIR elsewhere
const isRoot = typeof process.geteuid === "function" && process.geteuid() === 0;

/** Listens on `p` and counts every byte and connection any client sends it. */
async function impostor(p: string): Promise<{ bytes: () => number; conns: () => number; close: () => void }> {
  let bytes = 0;
  let conns = 0;
  const server = net.createServer((s) => {
    conns++;
    s.on("data", (d) => (bytes += d.length));
    s.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(p, resolve));
  return { bytes: () => bytes, conns: () => conns, close: () => server.close() };
}

/** A fresh short temp dir (a unix socket path has at most 107 bytes) as the default's TMPDIR. */
function defaultPathIn(): { base: string; sock: string } {
  const base = fs.mkdtempSync(path.join(TMP, "jdts"));
  const sock = defaultSocketPath({ TMPDIR: base });
  process.env.TMPDIR = base;
  delete process.env.XDG_RUNTIME_DIR;
  delete process.env.JOURNALD_SOCKET;
  delete process.env.JOURNALD_DAEMON_UID;
  return { base, sock };
}

test("connect refuses an impostor's pre-created socket dir and sends it nothing", { skip: !isRoot && "needs root: the impostor's directory must belong to another uid (chown)" }, async () => {
  const { base, sock } = defaultPathIn();
  const dir = path.dirname(sock);
  fs.mkdirSync(dir, { mode: 0o755 });
  const imp = await impostor(sock);
  try {
    fs.lchownSync(dir, NOBODY, NOBODY); // as if uid 65534 had made them
    fs.lchownSync(sock, NOBODY, NOBODY);
    let caught: unknown;
    try {
      (await Client.connect({ timeoutMs: 2000 })).close();
    } catch (err) {
      caught = err;
    }
    console.log(`impostor captured ${imp.bytes()} bytes over ${imp.conns()} connections`);
    assert.ok(caught instanceof UntrustedSocketError, `connect to another uid's socket: ${String(caught)}`);
    assert.ok(caught instanceof PermissionDeniedError);
    assert.equal(caught.code, "permission_denied");
    assert.equal(caught.metadata.found_uid, String(NOBODY));
    assert.equal(caught.metadata.path, dir);
    assert.equal(imp.bytes(), 0);
    assert.equal(imp.conns(), 0);
  } finally {
    imp.close();
    fs.rmSync(base, { recursive: true, force: true });
  }
});

test("connect refuses a world-writable or symlinked socket dir", async () => {
  const { base, sock } = defaultPathIn();
  const dir = path.dirname(sock);
  fs.mkdirSync(dir, { mode: 0o700 });
  fs.chmodSync(dir, 0o777);
  const imp = await impostor(sock);
  try {
    await assert.rejects(Client.connect({ timeoutMs: 2000 }), UntrustedSocketError);
    const real = path.join(base, "elsewhere");
    fs.renameSync(dir, real);
    fs.chmodSync(real, 0o700);
    fs.symlinkSync(real, dir);
    await assert.rejects(Client.connect({ timeoutMs: 2000 }), UntrustedSocketError);
    assert.equal(imp.bytes(), 0);
  } finally {
    imp.close();
    fs.rmSync(base, { recursive: true, force: true });
  }
});

test("a private socket dir of our own passes, and a configured daemon uid is required", async () => {
  const { base, sock } = defaultPathIn();
  fs.mkdirSync(path.dirname(sock), { mode: 0o700 });
  const imp = await impostor(sock);
  try {
    checkSocket(sock);
    const other = process.geteuid!() + 1;
    if (isRoot) checkSocket(sock, other); // root may always serve
    else assert.throws(() => checkSocket(sock, other), UntrustedSocketError);
  } finally {
    imp.close();
    fs.rmSync(base, { recursive: true, force: true });
  }
});
