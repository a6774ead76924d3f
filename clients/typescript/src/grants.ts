/**
 * Verify an Impri grant: the signed, single-use permission that comes with an approval.
 *
 * A grant is a compact JWS signed with Ed25519 (`alg: EdDSA`; RFC 9864's `Ed25519` is accepted
 * too). Its claims bind it to one action (`act`), to the SHA-256 of the approved payload's
 * RFC 8785 JSON (`payload_sha256`) and to an expiry (`exp`); `jti` is its id. The keys are
 * published at `{baseUrl}/.well-known/jwks.json`. Single use is the executor's part: remember
 * each `jti` you honoured until its `exp`, and refuse it a second time.
 */
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  errors as joseErrors,
  jwtVerify,
  type JSONWebKeySet,
  type JWTVerifyGetKey,
} from "jose";

import { payloadSha256 } from "./canonical.js";
import { InvalidGrant } from "./errors.js";
import type { GrantClaims, JsonValue } from "./types.js";

export const GRANT_ALGORITHMS = ["EdDSA", "Ed25519"];

export interface VerifyGrantOptions {
  /** `{baseUrl}/.well-known/jwks.json`: fetched once, and again for an unknown `kid`. */
  jwksUrl?: string | URL;
  /** The key set itself, instead of `jwksUrl`. */
  jwks?: JSONWebKeySet;
  /** The payload about to be executed: its hash must be the grant's `payload_sha256`. */
  payload: JsonValue;
  /** With it, `act` must name this action. */
  actionId?: string;
  /** Seconds of clock skew allowed on `exp` and `nbf`. Default 0. */
  clockToleranceS?: number;
  /** The time to check `exp` against (tests). */
  currentDate?: Date;
}

const remoteSets = new Map<string, JWTVerifyGetKey>();

/** EdDSA (RFC 8037) and Ed25519 (RFC 9864) name one signature: a key published with either `alg` verifies both. */
const SAME_SIGNATURE: Record<string, string> = { EdDSA: "Ed25519", Ed25519: "EdDSA" };

function eitherName(keys: JWTVerifyGetKey): JWTVerifyGetKey {
  return async (header, token) => {
    try {
      return await keys(header, token);
    } catch (error) {
      const other = SAME_SIGNATURE[header.alg ?? ""];
      if (!other || !(error instanceof joseErrors.JWKSNoMatchingKey)) throw error;
      return await keys({ ...header, alg: other }, token);
    }
  };
}

function keySet(options: VerifyGrantOptions): JWTVerifyGetKey {
  return eitherName(publishedKeys(options));
}

function publishedKeys(options: VerifyGrantOptions): JWTVerifyGetKey {
  if (options.jwks) return createLocalJWKSet(options.jwks);
  if (!options.jwksUrl) throw new TypeError("verifyGrant needs jwksUrl or jwks");
  const url = String(options.jwksUrl);
  let set = remoteSets.get(url);
  if (!set) {
    set = createRemoteJWKSet(new URL(url));
    remoteSets.set(url, set);
  }
  return set;
}

function reason(error: unknown): InvalidGrant {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof joseErrors.JWTExpired) return new InvalidGrant("expired", message);
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    return new InvalidGrant(error.claim === "nbf" ? "not_yet_valid" : "malformed", message);
  }
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return new InvalidGrant("bad_signature", message);
  if (error instanceof joseErrors.JOSEAlgNotAllowed || error instanceof joseErrors.JOSENotSupported) {
    return new InvalidGrant("unsupported_alg", message);
  }
  if (error instanceof joseErrors.JWKSNoMatchingKey || error instanceof joseErrors.JWKSMultipleMatchingKeys) {
    return new InvalidGrant("unknown_key", message);
  }
  if (error instanceof joseErrors.JOSEError) return new InvalidGrant("malformed", message);
  throw error; // the key set could not be fetched: not a verdict on the grant
}

/** Check `grant` against the payload about to be executed; resolves to its claims or rejects with `InvalidGrant`. */
export async function verifyGrant(grant: string, options: VerifyGrantOptions): Promise<GrantClaims> {
  if (typeof grant !== "string" || grant.split(".").length !== 3) {
    throw new InvalidGrant("malformed", "not a compact JWS (header.claims.signature)");
  }
  let claims: Record<string, unknown>;
  try {
    const verified = await jwtVerify(grant, keySet(options), {
      algorithms: GRANT_ALGORITHMS,
      requiredClaims: ["act", "payload_sha256", "jti", "exp"],
      clockTolerance: options.clockToleranceS ?? 0,
      currentDate: options.currentDate,
    });
    claims = verified.payload as Record<string, unknown>;
  } catch (error) {
    throw reason(error);
  }
  for (const name of ["act", "payload_sha256", "jti"]) {
    if (typeof claims[name] !== "string" || !claims[name]) throw new InvalidGrant("malformed", `claim '${name}' is missing`);
  }
  if (claims.payload_sha256 !== (await payloadSha256(options.payload))) {
    throw new InvalidGrant("payload_mismatch", "the payload is not the one that was approved");
  }
  if (options.actionId !== undefined && claims.act !== options.actionId) {
    throw new InvalidGrant("wrong_action", `the grant is for ${String(claims.act)}, not ${options.actionId}`);
  }
  return claims as GrantClaims;
}
