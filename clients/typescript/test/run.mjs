// `npm test`: the tests are TypeScript, compiled by `pretest` (tsc -p tsconfig.test.json, strict,
// against the real `ai` 6 and 7 and `@mastra/core` 0.24 and 1.x) into build-test/. One
// `impri serve` for every test file (unless IMPRI_URL names one), then node's test runner.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const built = join(dirname(fileURLToPath(import.meta.url)), "..", "build-test");
const { startServer } = await import(join(built, "server.js"));
const only = process.argv.slice(2); // e.g. `npm test -- mastra` runs the files whose name has "mastra"
const files = readdirSync(built)
  .filter((f) => f.endsWith(".test.js") && (!only.length || only.some((word) => f.includes(word))))
  .map((f) => join(built, f));
let server = null;
if (!process.env.IMPRI_URL) server = await startServer();
let status = 1;
try {
  const result = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...files], {
    stdio: "inherit",
    env: { ...process.env, ...(server?.env ?? {}) },
  });
  status = result.status ?? 1;
} finally {
  server?.stop();
}
process.exit(status);
