// A grant signed with RFC 9864's `alg: Ed25519` (and RFC 8037's `EdDSA`), against a key published
// as Impri publishes its own (`alg: EdDSA`, `use: sig`): verifyGrant accepts both, and so does the
// Python client's verify_grant, on the same grant and key set.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";

import { exportJWK, generateKeyPair, SignJWT } from "jose";

import { InvalidGrant, payloadSha256, verifyGrant } from "@impri/client";
import { live, python } from "./server.js";

const { url } = live();

const PYTHON_VERIFY = `
import json, sys
from impri_client import verify_grant
grant, payload, jwks = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(verify_grant(grant, payload, jwks=jwks).action_id)
`;

test("alg Ed25519 and EdDSA both verify, in the TypeScript and the Python client", async () => {
  const published = (await (await fetch(`${url}/.well-known/jwks.json`)).json()) as { keys: Record<string, string>[] };
  assert.equal(published.keys[0].alg, "EdDSA");
  const { publicKey, privateKey } = await generateKeyPair("Ed25519", { extractable: true });
  const jwk = { ...published.keys[0], ...(await exportJWK(publicKey)), kid: "ts-test-key" };
  const jwks = { keys: [jwk] };
  const payload = { order_id: "10432", amount_cents: 5000, currency: "USD" };
  for (const alg of ["Ed25519", "EdDSA"]) {
    const grant = await new SignJWT({ act: "act_ed25519", payload_sha256: await payloadSha256(payload), jti: `jti-${alg}` })
      .setProtectedHeader({ alg, kid: "ts-test-key", typ: "JWT" })
      .setIssuedAt()
      .setExpirationTime("5m")
      .sign(privateKey);
    const claims = await verifyGrant(grant, { jwks, payload, actionId: "act_ed25519" });
    assert.equal(claims.jti, `jti-${alg}`);
    await assert.rejects(verifyGrant(grant, { jwks, payload: { ...payload, amount_cents: 1 } }), (e: any) => e instanceof InvalidGrant && e.code === "payload_mismatch");
    const act = execFileSync(python(), ["-c", PYTHON_VERIFY, grant, JSON.stringify(payload), JSON.stringify(jwks)], { encoding: "utf8" });
    assert.equal(act.trim(), "act_ed25519", `the Python client verifies alg ${alg}`);
  }
});
