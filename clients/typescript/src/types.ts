/** What Impri answers and accepts, as the REST API (docs/api.md) has them: snake_case, Unix seconds. */

/** Free-form JSON, as Impri stores it (no NUL in text, numbers below 10^21, at most 64 deep). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export type ActionStatus =
  | "pending"
  | "approved"
  | "rejected"
  | "changes_requested"
  | "expired"
  | "cancelled"
  | "executed"
  | "failed";

export type PreviewFormat = "plain" | "markdown" | "diff" | "json";
export type RejectReason = "wrong_amount" | "policy" | "duplicate" | "needs_info" | "suspicious" | "other";

export interface Preview {
  format: PreviewFormat;
  body: string;
}

export interface Actor {
  type: "reviewer" | "rule" | "agent" | "system";
  name: string;
}

export interface Result {
  status: "executed" | "failed";
  detail: JsonObject | string | null;
  /** The processor's id the agent reported (a Stripe refund's `re_...`). */
  reference?: string | null;
  reported_at: number;
}

/** One movement the payment processor reported for an action (docs/reconciliation.md). */
export interface Movement {
  id: string;
  source: string;
  kind: "refund" | "charge";
  amount_minor: number;
  currency: string;
  occurred_at: number;
  state: string;
}

/** The money that moved, held against the approval: `matched`, `mismatch`, `unapproved`, `duplicate`, `unsettled`, `unreported`, `explained` or `awaiting`. */
export interface Reconciliation {
  state: string;
  movements: Movement[];
}

/** An editable path with the agent's own bounds (they can only narrow what the rules allow). */
export interface EditableBounds {
  path: string;
  min?: number;
  max?: number | "original";
}

/** What an agent pushes (POST /api/v1/actions). */
export interface ActionIn {
  kind: string;
  title: string;
  preview: Preview;
  payload: JsonObject;
  target_url?: string | null;
  editable?: (string | EditableBounds)[];
  flags?: string[];
  context?: JsonObject;
  idempotency_key?: string | null;
  callback_url?: string | null;
  expires_in_s?: number | null;
  supersedes?: string | null;
}

/** An action as the REST API returns it. */
export interface Action {
  action_id: string;
  agent: string;
  kind: string;
  title: string;
  preview: Preview;
  payload: JsonObject;
  original_payload: JsonObject;
  payload_sha256: string;
  context: JsonObject;
  target_url: string | null;
  editable: string[];
  edit_bounds: Record<string, { min?: number | "original"; max?: number | "original" }>;
  flags: string[];
  idempotency_key: string | null;
  status: ActionStatus;
  supersedes?: string | null;
  created_at: number;
  expires_at: number;
  decision_at: number | null;
  decided_by: Actor | null;
  note: string;
  reason?: RejectReason | null;
  edited_by_human: boolean;
  result: Result | null;
  /** What the payment processor moved for this action, held against the approval; null when nothing is known. */
  reconciliation?: Reconciliation | null;
  inbox_url: string;
}

/** GET /actions/{id}/decision (and the body of a webhook). Only `approved` allows executing. */
export interface Decision {
  action_id: string;
  status: ActionStatus;
  decision_at: number | null;
  /** What to execute once approved: the approved payload, possibly edited by a reviewer. */
  payload: JsonObject;
  preview: Preview;
  edited_by_human: boolean;
  decided_by: Actor | null;
  note: string;
  reason?: RejectReason | null;
  payload_sha256?: string | null;
  /** Approved: a signed single-use grant (compact JWS) the executor checks with `verifyGrant`. */
  grant?: string | null;
}

export interface ActionPage {
  items: Action[];
  next_cursor: string | null;
}

/** Claims of a verified grant. */
export interface GrantClaims {
  act: string;
  payload_sha256: string;
  iat?: number;
  exp: number;
  jti: string;
  [claim: string]: unknown;
}
