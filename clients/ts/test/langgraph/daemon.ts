/**
 * A real journald daemon for the LangGraph.js tests: `journald serve` on a temp socket and
 * data directory, stopped by its own pid. The binary is $JOURNALD_BIN, else the checkout's
 * .venv/bin/journald (what `make setup` installs), else `journald` on PATH.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import * as path from "node:path";
import { Client } from "../../src";

const START_TIMEOUT_MS = 60_000;

function findRepoRoot(): string {
  let dir = __dirname;
  while (!existsSync(path.join(dir, "proto", "journald"))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`no journald checkout above ${__dirname}`);
    dir = up;
  }
  return dir;
}

export function journaldBin(): string {
  if (process.env.JOURNALD_BIN) return process.env.JOURNALD_BIN;
  const venv = path.join(findRepoRoot(), ".venv", "bin", "journald");
  return existsSync(venv) ? venv : "journald";
}

export class Daemon {
  readonly dir: string;
  readonly socket: string;
  private proc: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();

  constructor(readonly backend = "file") {
    // unix socket paths are limited to ~107 bytes: keep it short, under /tmp
    this.dir = mkdtempSync(path.join("/tmp", "jd-ts-"));
    this.socket = path.join(this.dir, "journald.sock");
  }

  get pid(): number {
    if (this.proc?.pid === undefined) throw new Error("the daemon is not running");
    return this.proc.pid;
  }

  get log(): string {
    const file = path.join(this.dir, "daemon.log");
    return existsSync(file) ? readFileSync(file, "utf8") : "";
  }

  async start(): Promise<this> {
    const log = openSync(path.join(this.dir, "daemon.log"), "a");
    const argv = ["serve", "--socket", this.socket, "--data-dir", path.join(this.dir, "data")];
    const proc = spawn(journaldBin(), [...argv, "--backend", this.backend, "--scrub-interval-s", "0"], {
      stdio: ["ignore", log, log],
    });
    this.proc = proc;
    let failed: Error | undefined;
    this.exited = new Promise((resolve) => proc.once("exit", () => resolve()));
    proc.once("error", (err) => (failed = err));
    proc.once("exit", (code) => (failed ??= new Error(`journald exited with ${code}:\n${this.log}`)));
    const until = Date.now() + START_TIMEOUT_MS;
    while (!existsSync(this.socket)) {
      if (failed) throw failed;
      if (Date.now() > until) throw new Error(`journald did not serve within ${START_TIMEOUT_MS} ms:\n${this.log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const c = await Client.connect({ socket: this.socket, timeoutMs: Math.max(until - Date.now(), 1000) });
    c.close();
    return this;
  }

  /** A new connection to this daemon. */
  connect(clientName = "ts-langgraph-test"): Promise<Client> {
    return Client.connect({ socket: this.socket, clientName });
  }

  /** SIGTERM by pid and wait for the exit (the data directory stays). */
  async terminate(): Promise<void> {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      process.kill(this.pid, "SIGTERM");
      const timer = setTimeout(() => this.proc?.pid && process.kill(this.proc.pid, "SIGKILL"), 20_000);
      await this.exited;
      clearTimeout(timer);
    }
  }

  /** A new daemon process on the same socket and data directory. */
  async restart(): Promise<this> {
    await this.terminate();
    rmSync(this.socket, { force: true });
    return this.start();
  }

  /** Stop it and remove the temp directory. */
  async stop(): Promise<void> {
    await this.terminate();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The env a child node process needs to reach this daemon (and this checkout's packages). */
export function childEnv(d: Daemon): NodeJS.ProcessEnv {
  return { ...process.env, JOURNALD_SOCKET: d.socket, NODE_PATH: path.join(findRepoRoot(), "clients", "ts", "node_modules") };
}
