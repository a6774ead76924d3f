// A real `impri serve` for the tests, and Rita, a reviewer deciding over REST.
//
// With IMPRI_URL, IMPRI_AGENT_KEY, IMPRI_REVIEWER_KEY and IMPRI_WEBHOOK_SECRET set (CI's
// .ci/clients_check.py shares one server), those are used. Otherwise run.mjs starts one with
// IMPRI_PYTHON (default: the repository's .venv-test, else python3) on a fresh data dir.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, openSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../../..");

export function python(): string {
  if (process.env.IMPRI_PYTHON) return process.env.IMPRI_PYTHON;
  const venv = join(ROOT, ".venv-test/bin/python");
  return existsSync(venv) ? venv : "python3";
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => res(port));
    });
    srv.on("error", rej);
  });
}

/** Start `impri serve`; resolves to { url, env, stop }. */
export async function startServer(): Promise<{ env: Record<string, string>; stop(): void }> {
  const dataDir = mkdtempSync(join(tmpdir(), "impri-ts-"));
  const port = await freePort();
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith("IMPRI_") || name.startsWith("DJANGO_")) delete env[name];
  delete env.DATABASE_URL;
  delete env.REDIS_URL;
  Object.assign(env, {
    IMPRI_DATA_DIR: dataDir,
    SECRET_KEY: "ts-" + randomBytes(16).toString("hex"),
    IMPRI_CALLBACK_ALLOWED_NETWORKS: "127.0.0.0/8",
    IMPRI_MAX_AWAIT_S: "2", // awaitDecision must loop on pending
    PYTHONUNBUFFERED: "1",
  });
  const log = openSync(join(dataDir, "server.log"), "w");
  const child = spawn(python(), ["-m", "impri", "serve", "--port", String(port)], {
    env,
    cwd: dataDir,
    stdio: ["ignore", log, log],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`impri serve exited ${child.exitCode}; see ${dataDir}/server.log`);
    try {
      const r = await fetch(url + "/.well-known/jwks.json");
      if (r.ok) break;
    } catch {}
    if (Date.now() > deadline) throw new Error("impri serve did not start in 90 s");
    await new Promise((r) => setTimeout(r, 250));
  }
  const impri = (...args: string[]) => execFileSync(python(), ["-m", "impri", ...args], { env, cwd: dataDir, encoding: "utf8" });
  const lastWord = (...args: string[]) => impri(...args).trim().split("\n").pop()!.trim().split(/\s+/).pop()!;
  const agentKey = lastWord("createagent", "ts-bot");
  impri("createreviewer", "rita");
  const reviewerKey = lastWord("token", "rita");
  const secret = lastWord("webhooksecret", "ts-bot");
  return {
    env: { IMPRI_URL: url, IMPRI_AGENT_KEY: agentKey, IMPRI_REVIEWER_KEY: reviewerKey, IMPRI_WEBHOOK_SECRET: secret },
    stop() {
      child.kill("SIGTERM");
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** What the tests need: the server's URL, the agent key, Rita and the webhook secret. */
export function live() {
  const { IMPRI_URL, IMPRI_AGENT_KEY, IMPRI_REVIEWER_KEY, IMPRI_WEBHOOK_SECRET } = process.env;
  if (!IMPRI_URL || !IMPRI_AGENT_KEY || !IMPRI_REVIEWER_KEY) {
    throw new Error("run the tests with `npm test` (it starts impri serve) or set IMPRI_URL and the keys");
  }
  return { url: IMPRI_URL, agentKey: IMPRI_AGENT_KEY, rita: new Reviewer(IMPRI_URL, IMPRI_REVIEWER_KEY), secret: IMPRI_WEBHOOK_SECRET ?? "" };
}

export class Reviewer {
  readonly url: string;
  readonly headers: Record<string, string>;

  constructor(url: string, key: string) {
    this.url = url + "/api/v1";
    this.headers = { Authorization: `Bearer ${key}`, "Content-Type": "application/json" };
  }

  async #call(method: string, path: string, body?: unknown): Promise<any> {
    const r = await fetch(this.url + path, { method, headers: this.headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = await r.json();
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(json)}`);
    return json;
  }

  /** The pending action titled `title`, once it arrives. */
  async pendingTitled(title: string, timeoutMs = 30_000): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const page = await this.#call("GET", "/actions?status=pending&limit=200");
      const found = page.items.find((a: { title: string }) => a.title === title);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`no pending action titled ${title}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  approve(actionId: string, edits: Record<string, unknown> = {}, note = ""): Promise<any> {
    return this.#call("POST", `/actions/${actionId}/approve`, { edits, note });
  }

  reject(actionId: string, note = "", reason?: string): Promise<any> {
    return this.#call("POST", `/actions/${actionId}/reject`, reason ? { note, reason } : { note });
  }
}

/** A title no other test uses (one server serves every test file). */
export function unique(prefix: string): string {
  return `${prefix} ${randomBytes(4).toString("hex")}`;
}
