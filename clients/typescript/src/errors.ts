/** Typed errors, one class per answer an agent must tell apart (as in the Python client). */
import type { Actor, Decision, RejectReason } from "./types.js";

/** Base class of everything this client throws on purpose. */
export class ImpriError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

export interface ErrorBody {
  detail?: string;
  code?: string;
  field?: string | null;
  errors?: { field: string; message: string }[];
  [key: string]: unknown;
}

/** Impri answered with an error status. `detail` is its message, `code` its code, `field` the field. */
export class ApiError extends ImpriError {
  readonly status: number;
  readonly body: ErrorBody;
  readonly detail: string;
  readonly code: string | null;
  readonly field: string | null;

  constructor(status: number, body: unknown) {
    const parsed: ErrorBody =
      body && typeof body === "object" && !Array.isArray(body) ? (body as ErrorBody) : { detail: String(body) };
    const detail = String(parsed.detail || `HTTP ${status}`);
    super(`${status}: ${detail}`);
    this.status = status;
    this.body = parsed;
    this.detail = detail;
    this.code = typeof parsed.code === "string" ? parsed.code : null;
    this.field = typeof parsed.field === "string" ? parsed.field : null;
  }
}

/** 400: the body was not JSON. */
export class BadRequest extends ApiError {}
/** 401: no key, an unknown or revoked key, or a disabled agent. */
export class AuthenticationError extends ApiError {}
/** 403: the key may not do this (another agent's action, a reviewer token as an agent). */
export class PermissionDenied extends ApiError {}
/** 404: no such action (or not one this key can see). */
export class NotFound extends ApiError {}
/** 409: the action is not in a state that allows this, or a key/grant was reused. */
export class Conflict extends ApiError {}
/** 413: the body is larger than the server's IMPRI_MAX_BODY_BYTES. */
export class PayloadTooLarge extends ApiError {}

/** 422: invalid input; `field` names it (`payload`, `editable`, `preview.format`…). */
export class ValidationError extends ApiError {
  /** Every problem the server listed, as `{field, message}`. */
  get errors(): { field: string | null; message: string }[] {
    return this.body.errors ?? [{ field: this.field, message: this.detail }];
  }
}

/** 429: too many requests a minute with this key. `retryAfterS` from the Retry-After header. */
export class RateLimited extends ApiError {
  retryAfterS: number | null = null;
}
/** 5xx: a fault on the server's side. */
export class ServerError extends ApiError {}
/** 503: the database is unavailable for a moment; retry. */
export class ServiceUnavailable extends ServerError {}

const BY_STATUS: Record<number, new (status: number, body: unknown) => ApiError> = {
  400: BadRequest,
  401: AuthenticationError,
  403: PermissionDenied,
  404: NotFound,
  409: Conflict,
  413: PayloadTooLarge,
  422: ValidationError,
  429: RateLimited,
  503: ServiceUnavailable,
};

export function errorFor(status: number, body: unknown): ApiError {
  const cls = BY_STATUS[status] ?? (status >= 500 ? ServerError : ApiError);
  return new cls(status, body);
}

// --- Outcomes of a decision ------------------------------------------------------

/** The action was decided and not approved: nothing may be executed. */
export class ActionNotApproved extends ImpriError {
  readonly decision: Decision;
  readonly actionId: string;
  readonly status: string;
  readonly note: string;
  readonly reason: RejectReason | null;
  readonly decidedBy: Actor | null;

  constructor(decision: Decision) {
    const who = decision.decided_by ? ` by ${decision.decided_by.name}` : "";
    let text = `action ${decision.action_id} was ${decision.status}${who}`;
    if (decision.reason) text += ` (reason: ${decision.reason})`;
    if (decision.note) text += `: ${decision.note}`;
    super(text);
    this.decision = decision;
    this.actionId = decision.action_id;
    this.status = decision.status;
    this.note = decision.note ?? "";
    this.reason = decision.reason ?? null;
    this.decidedBy = decision.decided_by ?? null;
  }
}

/** A reviewer (or a rule) rejected the action. */
export class ActionRejected extends ActionNotApproved {}
/** A reviewer asked for changes: `note` says what; push a corrected action with `supersedes`. */
export class ChangesRequested extends ActionNotApproved {}
/** Nobody decided before the action's `expires_at`. */
export class ActionExpired extends ActionNotApproved {}
/** The agent cancelled the action before anyone decided. */
export class ActionCancelled extends ActionNotApproved {}

/** The outcome error for a decision that is not `approved` (nor pending). */
export function notApproved(decision: Decision): ActionNotApproved {
  switch (decision.status) {
    case "rejected":
      return new ActionRejected(decision);
    case "changes_requested":
      return new ChangesRequested(decision);
    case "expired":
      return new ActionExpired(decision);
    case "cancelled":
      return new ActionCancelled(decision);
    default:
      return new ActionNotApproved(decision);
  }
}

/** The action already carries a result (`executed` or `failed`): never execute it twice. */
export class AlreadySettled extends ImpriError {
  readonly decision: Decision;
  readonly actionId: string;
  readonly status: string;
  constructor(decision: Decision) {
    super(`action ${decision.action_id} was already reported ${decision.status}`);
    this.decision = decision;
    this.actionId = decision.action_id;
    this.status = decision.status;
  }
}

/** The gated function ran, but its result could not be reported; report it again with `reportResult`. */
export class ResultNotReported extends ImpriError {
  constructor(
    readonly actionId: string,
    readonly status: "executed" | "failed",
    readonly value: unknown,
    readonly cause: unknown,
  ) {
    super(`action ${actionId} ran (${status}) but the report failed: ${String(cause)}`);
  }
}

/** `awaitDecision`'s own deadline passed while the action was still pending. */
export class DecisionTimeout extends ImpriError {
  constructor(
    readonly actionId: string,
    readonly waitedS: number,
  ) {
    super(`action ${actionId} is still pending after ${Math.round(waitedS)} s`);
  }
}

/**
 * A grant that must not be honoured. `code`: `malformed`, `unsupported_alg`, `unknown_key`,
 * `bad_signature`, `expired`, `not_yet_valid`, `payload_mismatch`, `wrong_action`.
 */
export class InvalidGrant extends ImpriError {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`invalid grant (${code}): ${message}`);
  }
}

/** The request is not a genuine, fresh webhook from Impri: answer 400 and drop it. */
export class WebhookVerificationError extends ImpriError {}
