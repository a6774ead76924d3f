/** `Impri`: the REST API at `{baseUrl}/api/v1` over `fetch` (Node 20+, browsers, edge runtimes). */
import { ApiError, ImpriError, RateLimited, ServiceUnavailable, errorFor } from "./errors.js";
import { verifyGrant, type VerifyGrantOptions } from "./grants.js";
import type {
  Action,
  ActionIn,
  ActionPage,
  ActionStatus,
  Decision,
  GrantClaims,
  JsonObject,
  JsonValue,
} from "./types.js";

export const VERSION = "0.1.0";
/** One long-poll call waits at most this long: proxies close idle connections at 60 s. */
export const DEFAULT_POLL_S = 50;
/** Failed long-poll calls in a row (network, 503, 429) a wait rides out, with backoff. */
export const DEFAULT_WAIT_RETRIES = 8;

export interface ImpriOptions {
  /** The server's root, e.g. `http://127.0.0.1:8000` (not `/api/v1`). */
  baseUrl: string;
  /** An agent key (`imp_a_…`) or a reviewer token; default `IMPRI_API_KEY` where there is `process.env`. */
  apiKey?: string;
  /** Seconds a request may take (long-polls get their wait on top). Default 30. */
  timeoutS?: number;
  /** Seconds one long-poll call waits at most. Default 50. */
  pollS?: number;
  waitRetries?: number;
  /** A `fetch` of your own (tests, proxies, instrumentation). */
  fetch?: typeof fetch;
}

export interface PushOptions {
  /** A retry with the same key and the same action answers the first action instead of a second one. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface AwaitOptions {
  /** Give up (answering the `pending` decision) after this many seconds; default: until decided. */
  timeoutS?: number;
  signal?: AbortSignal;
}

export interface ReportOptions {
  status: "executed" | "failed";
  /** What the executor reported: text or a JSON object (e.g. the processor's transaction id). */
  detail?: JsonObject | string | null;
  /** The grant that came with the approval, when the executor checked one. */
  grant?: string | null;
  /**
   * The processor's id for what was executed (a Stripe refund's `re_...`): reported as
   * `result.reference`, which reconciliation matches the money that moved by.
   */
  reference?: string | null;
  signal?: AbortSignal;
}

export interface ListOptions {
  status?: ActionStatus;
  kind?: string;
  agent?: string;
  cursor?: string;
  limit?: number;
  signal?: AbortSignal;
}

interface Call {
  method: "GET" | "POST";
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  waitS?: number;
  auth?: boolean;
  signal?: AbortSignal;
}

function envKey(): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.IMPRI_API_KEY;
}

function segment(actionId: string): string {
  if (!actionId || actionId.includes("/") || actionId === "." || actionId === "..") {
    throw new TypeError(`not an action id: ${JSON.stringify(actionId)}`);
  }
  return encodeURIComponent(actionId);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });

/** A network failure (`fetch` rejects with a TypeError), a timed-out call, a 503 or a 429: nothing changed on the server. */
function transient(error: unknown): boolean {
  if (error instanceof ServiceUnavailable || error instanceof RateLimited || error instanceof TypeError) return true;
  return error instanceof Error && error.name === "TimeoutError";
}

export class Impri {
  readonly baseUrl: string;
  readonly timeoutS: number;
  readonly pollS: number;
  readonly waitRetries: number;
  readonly #key: string;
  readonly #fetch: typeof fetch;

  constructor(options: ImpriOptions) {
    const key = options.apiKey ?? envKey();
    if (!key) throw new TypeError("an API key is needed: pass apiKey or set IMPRI_API_KEY");
    if (!/^https?:\/\/[^/]/.test(options.baseUrl ?? "")) {
      throw new TypeError(`baseUrl must be http(s)://host[:port], got ${JSON.stringify(options.baseUrl)}`);
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.timeoutS = options.timeoutS ?? 30;
    this.pollS = options.pollS ?? DEFAULT_POLL_S;
    this.waitRetries = options.waitRetries ?? DEFAULT_WAIT_RETRIES;
    this.#key = key;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  async #send<T>(call: Call): Promise<T> {
    const url = new URL(this.baseUrl + call.path);
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { Accept: "application/json" };
    if (call.auth !== false) headers.Authorization = `Bearer ${this.#key}`;
    if (call.body !== undefined) headers["Content-Type"] = "application/json";
    const limit = AbortSignal.timeout(Math.ceil((this.timeoutS + (call.waitS ?? 0)) * 1000)); // an integer, or it throws
    const signal = call.signal ? AbortSignal.any([call.signal, limit]) : limit;
    const response = await this.#fetch(url, {
      method: call.method,
      headers,
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
      signal,
    });
    const text = await response.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = { detail: text.slice(0, 500) || response.statusText };
    }
    if (!response.ok) {
      const error = errorFor(response.status, body);
      if (error instanceof RateLimited) {
        const after = Number(response.headers.get("Retry-After"));
        error.retryAfterS = Number.isFinite(after) ? after : null;
      }
      throw error;
    }
    return body as T;
  }

  /** Propose an action; resolves to the action as the REST API returns it (usually `pending`). */
  push(action: ActionIn, options: PushOptions = {}): Promise<Action> {
    const body: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(action)) {
      if (value !== undefined && value !== null) body[name] = value; // an older server refuses unknown fields
    }
    if (options.idempotencyKey) body.idempotency_key = options.idempotencyKey;
    return this.#send<Action>({ method: "POST", path: "/api/v1/actions", body, signal: options.signal });
  }

  /**
   * Wait for the decision, calling again while Impri answers `pending` (each call waits at most
   * the server's IMPRI_MAX_AWAIT_S and `pollS`). Without `timeoutS` it waits until the action is
   * decided (or expires); with one it resolves to the `pending` decision once that time passed.
   * Brief outages (network, 503, 429) are ridden out with backoff. Execute `payload` of an
   * `approved` decision, never your own arguments: a reviewer may have changed them.
   */
  async awaitDecision(actionId: string, options: AwaitOptions = {}): Promise<Decision> {
    const deadline = options.timeoutS === undefined ? undefined : Date.now() + options.timeoutS * 1000;
    const path = `/api/v1/actions/${segment(actionId)}/decision`; // a bad id throws here, not retried
    let failures = 0;
    for (;;) {
      const wait = deadline === undefined ? this.pollS : Math.max(0, Math.min(this.pollS, (deadline - Date.now()) / 1000));
      const started = Date.now();
      let decision: Decision;
      try {
        decision = await this.#send<Decision>({
          method: "GET",
          path,
          query: { timeout_s: Math.round(wait * 1000) / 1000 },
          waitS: wait,
          signal: options.signal,
        });
      } catch (error) {
        if (options.signal?.aborted || !transient(error)) throw error;
        failures += 1;
        if (failures > this.waitRetries || (deadline !== undefined && Date.now() >= deadline)) throw error;
        await sleep(Math.min(250 * 2 ** failures, 10_000), options.signal);
        continue;
      }
      failures = 0;
      if (decision.status !== "pending" || (deadline !== undefined && Date.now() >= deadline)) return decision;
      if (Date.now() - started < Math.min(wait * 1000, 1000)) await sleep(500, options.signal); // answered early: don't spin
    }
  }

  /** Report `executed` or `failed` with `detail`; the same report again is a no-op. */
  reportResult(actionId: string, options: ReportOptions): Promise<Action> {
    const body: Record<string, unknown> = { status: options.status, detail: options.detail ?? null };
    if (options.grant) body.grant = options.grant;
    if (options.reference) body.reference = options.reference;
    return this.#send<Action>({
      method: "POST",
      path: `/api/v1/actions/${segment(actionId)}/result`,
      body,
      signal: options.signal,
    });
  }

  get(actionId: string, options: { signal?: AbortSignal } = {}): Promise<Action> {
    return this.#send<Action>({ method: "GET", path: `/api/v1/actions/${segment(actionId)}`, signal: options.signal });
  }

  /** Withdraw a pending action (`Conflict` once it was decided). */
  cancel(actionId: string, options: { reason?: string; signal?: AbortSignal } = {}): Promise<Action> {
    return this.#send<Action>({
      method: "POST",
      path: `/api/v1/actions/${segment(actionId)}/cancel`,
      body: { reason: options.reason ?? "" },
      signal: options.signal,
    });
  }

  /** One page, newest first: `{items, next_cursor}`; pass `next_cursor` as `cursor` for the next. */
  list(options: ListOptions = {}): Promise<ActionPage> {
    const { signal, ...filters } = options;
    return this.#send<ActionPage>({ method: "GET", path: "/api/v1/actions", query: { ...filters }, signal });
  }

  /** The URL of the server's grant-signing public keys. */
  get jwksUrl(): string {
    return `${this.baseUrl}/.well-known/jwks.json`;
  }

  /** `verifyGrant` against this server's published keys. */
  verifyGrant(grant: string, payload: JsonValue, options: Omit<VerifyGrantOptions, "jwksUrl" | "jwks" | "payload"> = {}): Promise<GrantClaims> {
    return verifyGrant(grant, { ...options, jwksUrl: this.jwksUrl, payload });
  }
}

export { ApiError, ImpriError };
