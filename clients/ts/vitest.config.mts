// vitest runs only LangGraph's checkpoint validation suite (it needs vitest's globals);
// every other test is node --test on the tsc output (package.json "test").
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    globals: true,
    include: ["test/validation/**/*.vitest.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
