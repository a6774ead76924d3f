// `npm test`: one `impri serve` for every test file (unless IMPRI_URL names one), then node's test runner.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const files = readdirSync(here).filter((f) => f.endsWith(".test.mjs")).map((f) => join(here, f));
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
