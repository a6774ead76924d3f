// A decision delivered to a callback_url, verified with verifyWebhook (Standard Webhooks).
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { Impri, WebhookVerificationError, verifyWebhook } from "@impri/client";
import { live, unique } from "./server.js";

const { url, agentKey, rita, secret } = live();
const impri = new Impri({ baseUrl: url, apiKey: agentKey });

interface Receiver {
  url: string;
  deliveries: { headers: IncomingHttpHeaders; body: Buffer }[];
  arrived: Promise<void>;
  close(): void;
}

function receiver(): Promise<Receiver> {
  const deliveries: Receiver["deliveries"] = [];
  let notify = () => {};
  const arrived = new Promise<void>((resolve) => (notify = resolve));
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      deliveries.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(204).end();
      notify();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/impri-hook`, deliveries, arrived, close: () => server.close() })),
  );
}

test("the approval arrives at callback_url and verifyWebhook accepts it, and only it", { timeout: 60_000 }, async () => {
  const hook = await receiver();
  try {
    const title = unique("Refund with a webhook");
    const action = await impri.push({
      kind: "payment.refund",
      title,
      preview: { format: "plain", body: "Refund 20" },
      payload: { order_id: "7", amount_cents: 2000, currency: "USD" },
      editable: ["payload.amount_cents"],
      callback_url: hook.url,
    });
    await rita.approve(action.action_id, { "payload.amount_cents": 1500 });
    await hook.arrived;
    const { headers, body } = hook.deliveries[0];
    assert.ok(headers["webhook-id"] && String(headers["webhook-signature"]).startsWith("v1,"));

    const decision = await verifyWebhook(headers, body, secret);
    assert.equal(decision.action_id, action.action_id);
    assert.equal(decision.status, "approved");
    assert.deepEqual(decision.payload, { order_id: "7", amount_cents: 1500, currency: "USD" });
    assert.ok(decision.grant);
    // The same from a fetch-style Headers and text body.
    const asHeaders = new Headers(Object.entries(headers).map(([k, v]): [string, string] => [k, String(v)]));
    assert.equal((await verifyWebhook(asHeaders, body.toString("utf8"), secret)).action_id, action.action_id);

    const tampered = Buffer.from(body.toString("utf8").replace('"amount_cents": 1500', '"amount_cents": 9999').replace('"amount_cents":1500', '"amount_cents":9999'));
    assert.notDeepEqual(tampered, body);
    await assert.rejects(verifyWebhook(headers, tampered, secret), WebhookVerificationError);
    const otherSecret = "whsec_" + Buffer.from("another agent's secret!!").toString("base64");
    await assert.rejects(verifyWebhook(headers, body, otherSecret), WebhookVerificationError);
    await assert.rejects(verifyWebhook({ ...headers, "webhook-timestamp": String(Math.floor(Date.now() / 1000) - 3600) }, body, secret), WebhookVerificationError);
    await assert.rejects(verifyWebhook({}, body, secret), WebhookVerificationError);
  } finally {
    hook.close();
  }
});
