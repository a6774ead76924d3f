/**
 * The canonical JSON of a payload (RFC 8785, JSON Canonicalization Scheme) and its SHA-256:
 * the `payload_sha256` a decision and its grant name. Byte for byte the server's encoding
 * (approvals.services.payload_sha256; the Python client's impri_client.canonical).
 *
 * JavaScript numbers are doubles, and Impri's payloads are I-JSON (numbers within
 * ±(2^53 − 1), refused beyond), so every payload Impri returns hashes here as on the server.
 */

export function canonicalJson(value: unknown): string {
  return encode(value);
}

function encode(value: unknown): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw new TypeError("NaN and Infinity are not JSON numbers");
      // ECMAScript's Number::toString is RFC 8785's number form (-0 prints as 0).
      return JSON.stringify(value);
    case "string":
      // JSON.stringify escapes as RFC 8785 asks (\n, \", other controls as \u00xx).
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value)) return "[" + value.map(encode).join(",") + "]";
      const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
      // Keys in UTF-16 code unit order: JavaScript's default string order.
      entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return "{" + entries.map(([k, v]) => JSON.stringify(k) + ":" + encode(v)).join(",") + "}";
    }
    default:
      throw new TypeError(`${typeof value} is not a JSON value`);
  }
}

/** Hex SHA-256 of the payload's canonical JSON (Web Crypto: Node 20+, browsers, edge runtimes). */
export async function payloadSha256(payload: unknown): Promise<string> {
  const bytes = new TextEncoder().encode(canonicalJson(payload));
  const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}
