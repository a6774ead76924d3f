// The client against a real `impri serve`: push, a reviewer edits, await, verify the grant, report.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AuthenticationError,
  Conflict,
  Impri,
  InvalidGrant,
  NotFound,
  PermissionDenied,
  ValidationError,
  canonicalJson,
  payloadSha256,
  verifyGrant,
  type ActionIn,
} from "@impri/client";
import { live, unique } from "./server.js";

const { url, agentKey, rita } = live();
const impri = new Impri({ baseUrl: url, apiKey: agentKey });

function refund(title: string, amount = 8400): ActionIn {
  return {
    kind: "payment.refund",
    title,
    preview: { format: "markdown", body: `Refund **$${amount / 100}**` },
    payload: { order_id: "10432", amount_cents: amount, currency: "USD" },
    editable: ["payload.amount_cents"],
    context: { customer_message: "The mug arrived broken." },
  };
}

test("push, a reviewer edits, awaitDecision answers the edited payload with a grant that verifies", async () => {
  const title = unique("Refund $84.00 on order 10432");
  const key = unique("refund-10432").replace(" ", "-");
  const action = await impri.push(refund(title), { idempotencyKey: key });
  assert.equal(action.status, "pending");
  assert.equal(action.idempotency_key, key);
  assert.deepEqual(action.payload, { order_id: "10432", amount_cents: 8400, currency: "USD" });
  assert.match(action.inbox_url, /\/inbox\/actions\/act_/);
  assert.equal(action.payload_sha256, await payloadSha256(action.payload));

  const again = await impri.push(refund(title), { idempotencyKey: key });
  assert.equal(again.action_id, action.action_id, "a replayed push answers the same action");

  // The server answers pending after IMPRI_MAX_AWAIT_S (2 s): the wait loops until Rita decides.
  const waiting = impri.awaitDecision(action.action_id, { timeoutS: 60 });
  await new Promise((r) => setTimeout(r, 2500));
  await rita.approve(action.action_id, { "payload.amount_cents": 5000 }, "partial refund");
  const decision = await waiting;
  assert.equal(decision.status, "approved");
  assert.deepEqual(decision.payload, { order_id: "10432", amount_cents: 5000, currency: "USD" });
  assert.equal(decision.edited_by_human, true);
  assert.equal(decision.decided_by?.name, "rita");
  assert.equal(decision.note, "partial refund");
  assert.equal(decision.payload_sha256, await payloadSha256(decision.payload));

  const grant = decision.grant!;
  const jwksUrl = `${url}/.well-known/jwks.json`;
  const claims = await verifyGrant(grant, { jwksUrl, payload: decision.payload, actionId: action.action_id });
  assert.equal(claims.act, action.action_id);
  assert.equal(claims.payload_sha256, decision.payload_sha256);
  assert.ok(claims.exp > Date.now() / 1000);

  for (const payload of [action.payload, { ...decision.payload, amount_cents: 5001 }, { ...decision.payload, extra: 1 }]) {
    await assert.rejects(verifyGrant(grant, { jwksUrl, payload }), (e: any) => e instanceof InvalidGrant && e.code === "payload_mismatch");
  }
  await assert.rejects(
    verifyGrant(grant, { jwksUrl, payload: decision.payload, actionId: "act_other" }),
    (e: any) => e instanceof InvalidGrant && e.code === "wrong_action",
  );
  const [h, c, s] = grant.split(".");
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(c, "base64url").toString()), payload_sha256: "0".repeat(64) })).toString("base64url");
  await assert.rejects(verifyGrant(`${h}.${forged}.${s}`, { jwksUrl, payload: decision.payload }), (e: any) => e instanceof InvalidGrant && e.code === "bad_signature");
  await assert.rejects(
    verifyGrant(grant, { jwksUrl, payload: decision.payload, currentDate: new Date((claims.exp + 1) * 1000) }),
    (e: any) => e instanceof InvalidGrant && e.code === "expired",
  );
  const otherKey = { keys: [{ kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", kid: "other" }] };
  await assert.rejects(verifyGrant(grant, { jwks: otherKey, payload: decision.payload }), InvalidGrant);
  assert.deepEqual(await impri.verifyGrant(grant, decision.payload), claims);

  const reported = await impri.reportResult(action.action_id, {
    status: "executed",
    detail: { refund_id: "re_1", amount_cents: 5000 },
    grant: decision.grant,
  });
  assert.equal(reported.status, "executed");
  assert.deepEqual(reported.result?.detail, { refund_id: "re_1", amount_cents: 5000 });
  assert.equal(reported.result?.reference ?? null, null, "no reference reported: null");
  assert.equal((await impri.get(action.action_id)).status, "executed");
});

test("reportResult carries the processor's reference beside detail", async () => {
  const action = await impri.push(refund(unique("Refund with a reference")));
  await rita.approve(action.action_id);
  const reported = await impri.reportResult(action.action_id, {
    status: "executed",
    detail: "refunded",
    reference: "re_ts_1",
  });
  assert.equal(reported.result?.reference, "re_ts_1");
  assert.equal(reported.result?.detail, "refunded");
  assert.equal((await impri.get(action.action_id)).result?.reference, "re_ts_1");
});

test("awaitDecision with timeoutS answers pending; cancel withdraws; list pages", async () => {
  const title = unique("Refund to cancel");
  const action = await impri.push(refund(title, 1200));
  const started = Date.now();
  const pending = await impri.awaitDecision(action.action_id, { timeoutS: 3 });
  assert.equal(pending.status, "pending");
  assert.ok(Date.now() - started >= 2900, "waited the whole timeout across server waits");
  const cancelled = await impri.cancel(action.action_id, { reason: "customer withdrew" });
  assert.equal(cancelled.status, "cancelled");
  assert.equal((await impri.awaitDecision(action.action_id)).status, "cancelled");
  await assert.rejects(impri.cancel(action.action_id), Conflict);

  const page = await impri.list({ status: "cancelled", limit: 1 });
  assert.equal(page.items.length, 1);
  assert.ok(page.next_cursor === null || typeof page.next_cursor === "string");
  const mine = await impri.list({ status: "cancelled", limit: 200 });
  assert.ok(mine.items.some((a) => a.action_id === action.action_id));
});

test("typed errors mirror the server's answers", async () => {
  await assert.rejects(impri.get("act_doesnotexist"), (e: any) => e instanceof NotFound && e.status === 404 && e.code === "not_found");
  await assert.rejects(
    impri.push({ ...refund(unique("bad")), editable: ["payload.missing"] }),
    (e: any) => e instanceof ValidationError && e.status === 422 && e.field === "editable" && e.errors.length >= 1,
  );
  const stranger = new Impri({ baseUrl: url, apiKey: "imp_a_not_a_key" });
  await assert.rejects(stranger.list(), (e: any) => e instanceof AuthenticationError && e.status === 401);
  assert.throws(() => new Impri({ baseUrl: "127.0.0.1:8000", apiKey: "x" }), TypeError);
  const started = Date.now();
  await assert.rejects(impri.awaitDecision("a/b"), TypeError);
  assert.ok(Date.now() - started < 200, "a bad id is refused at once, not retried as a network error");
});

test("canonical JSON is RFC 8785's", async () => {
  assert.equal(canonicalJson({ b: [1.0, 1e21, -0, 1e-7], a: "é\n\u0001", "\u20ac": null, "\ud83d\ude00": true }), '{"a":"é\\n\\u0001","b":[1,1e+21,0,1e-7],"€":null,"😀":true}');
  // Python's impri_client.payload_sha256 of the same payload (tests/test_client_canonical.py checks it against the server).
  assert.equal(await payloadSha256({ order_id: "10432", amount_cents: 5000, currency: "USD" }), await payloadSha256({ currency: "USD", amount_cents: 5000.0, order_id: "10432" }));
});

test("awaitDecision rides out network failures and a 503 with backoff; gives up after waitRetries", async () => {
  const action = await impri.push(refund(unique("Refund through a flaky network"), 900));
  let failures = 0;
  const flaky = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (String(input).includes("/decision") && failures < 3) {
      failures += 1;
      if (failures === 2) return new Response(JSON.stringify({ detail: "the database is unavailable", code: "unavailable" }), { status: 503 });
      throw new TypeError("fetch failed"); // what fetch throws when the connection is refused
    }
    return fetch(input, init);
  };
  const patient = new Impri({ baseUrl: url, apiKey: agentKey, fetch: flaky });
  const waiting = patient.awaitDecision(action.action_id, { timeoutS: 30 });
  await rita.approve(action.action_id);
  const decision = await waiting;
  assert.equal(decision.status, "approved");
  assert.equal(failures, 3);

  const down = new Impri({ baseUrl: url, apiKey: agentKey, waitRetries: 1, fetch: async () => { throw new TypeError("fetch failed"); } });
  await assert.rejects(down.awaitDecision(action.action_id), TypeError);
  const refused = new Impri({ baseUrl: url, apiKey: agentKey, fetch: async () => new Response('{"detail": "no"}', { status: 403 }) });
  await assert.rejects(refused.awaitDecision(action.action_id), PermissionDenied);
});
