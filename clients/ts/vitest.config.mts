// vitest runs only LangGraph's checkpoint validation suite (it needs vitest's globals);
// every other test is node --test on the tsc output (package.json "test").
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    globals: true,
    include: ["test/validation/**/*.vitest.ts"],
    // bounds, not waits: generous for two suites side by side on 2 cores, and above the
    // daemon's own start-up bound (60 s, test/langgraph/daemon.ts) that a hook may wait out
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
