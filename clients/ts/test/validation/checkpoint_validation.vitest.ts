/**
 * LangGraph's own saver conformance suite (@langchain/langgraph-checkpoint-validation)
 * against JournaldSaver on a real daemon: one `journald serve` for the whole suite (a temp
 * socket and data directory, stopped by its pid); each checkpointer the suite creates gets
 * its own connection, and every thread it wrote is deleted when the suite destroys it, so
 * no instance reads another's threads. Run by `npm test` through vitest.config.mts.
 */
import { validate } from "@langchain/langgraph-checkpoint-validation";
import { FINGERPRINT, JournaldSaver } from "../../src/langgraph";
import { Daemon } from "../langgraph/daemon";

let daemon: Daemon | undefined;

validate<JournaldSaver>({
  checkpointerName: "JournaldSaver",
  beforeAllTimeout: 120_000, // above the daemon's 60 s start-up bound (a loaded machine)
  async beforeAll() {
    daemon = await new Daemon("file").start();
  },
  async afterAll() {
    await daemon?.stop();
  },
  async createCheckpointer() {
    if (!daemon) throw new Error("the daemon did not start");
    return JournaldSaver.connect({ socket: daemon.socket, name: "langgraph-validation" });
  },
  async destroyCheckpointer(saver) {
    for (const run of await saver.client.list()) {
      if (run.model === FINGERPRINT.model) await saver.client.delete(run.runId);
    }
    await saver.close();
  },
});
