/**
 * Verify a webhook from Impri (Standard Webhooks): the decision body POSTed to an action's
 * `callback_url`, signed with the agent's `whsec_` secret. Deduplicate on `webhook-id`.
 */
import { Webhook } from "standardwebhooks";

import { WebhookVerificationError } from "./errors.js";
import type { Decision } from "./types.js";

export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

function headerRecord(headers: WebhookHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof (headers as Headers).forEach === "function" && typeof (headers as Headers).get === "function") {
    (headers as Headers).forEach((value, name) => {
      out[name.toLowerCase()] = value;
    });
    return out;
  }
  for (const [name, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(" ") : value;
  }
  return out;
}

/**
 * Check the signature and freshness (5 minutes) of a delivery; resolves to its decision body.
 * `body` must be the raw text (or bytes) received, not re-serialized JSON.
 * Rejects with `WebhookVerificationError`.
 */
export async function verifyWebhook(
  headers: WebhookHeaders,
  body: string | Uint8Array | ArrayBuffer,
  secret: string,
): Promise<Decision> {
  const text = typeof body === "string" ? body : new TextDecoder().decode(body);
  let webhook: Webhook;
  try {
    webhook = new Webhook(secret);
  } catch (error) {
    throw new WebhookVerificationError(`the secret is not a whsec_ secret (${String(error)})`);
  }
  try {
    return webhook.verify(text, headerRecord(headers)) as Decision;
  } catch (error) {
    throw new WebhookVerificationError(error instanceof Error ? error.message : String(error));
  }
}
