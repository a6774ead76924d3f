/**
 * `gate`: run a function only with what a reviewer approved, and report how it went.
 * The framework adapters (`impriTool` for the AI SDK, `gateMastraTool` and
 * `answerToolApprovals` for Mastra) are built on it.
 */
import type { Impri } from "./client.js";
import { AlreadySettled, DecisionTimeout, ResultNotReported, notApproved } from "./errors.js";
import type { ActionIn, Decision, EditableBounds, JsonObject, Preview } from "./types.js";

/** How a proposal becomes an action: everything but `payload` (the arguments) and the key. */
export interface ActionSpec {
  kind: string;
  title: string;
  /** Default: the payload as JSON. */
  preview?: Preview;
  editable?: (string | EditableBounds)[];
  flags?: string[];
  context?: JsonObject;
  target_url?: string;
  callback_url?: string;
  expires_in_s?: number;
  supersedes?: string;
}

export type ActionSpecFor<I> = ActionSpec | ((input: I) => ActionSpec);

export interface GateOptions<I> {
  action: ActionSpecFor<I>;
  /** The same key for the same work item: a replay (a framework re-running a step) finds the same action. */
  idempotencyKey: string;
  /** Give up waiting after this many seconds (`DecisionTimeout`); default: until decided or expired. */
  timeoutS?: number;
  /**
   * The processor's id in what `run` returned (e.g. `(refund) => refund.id`), reported as
   * `result.reference` beside `detail`. Pass `decision.action_id` to the processor as
   * `metadata.impri_action_id` too: reconciliation matches by either (docs/reconciliation.md).
   */
  reference?: (value: unknown) => string | null | undefined;
  signal?: AbortSignal;
}

const APPROVED = Symbol.for("impri.approved");

/** What a gated tool's `execute` is told about the approval it runs under. */
export interface Approval {
  /** Pass it to the processor (e.g. Stripe `metadata[impri_action_id]`): reconciliation finds the action by it. */
  actionId: string;
  /** The signed grant for exactly this payload (`verifyGrant`), when the server signs grants. */
  grant: string | null;
  decision: Decision;
}

/** The options (AI SDK, Mastra 1.x) or context (Mastra 0.24) object with the approval added. */
export function withApproval<T extends object>(options: T | undefined, decision: Decision): T {
  const approval: Approval = { actionId: decision.action_id, grant: decision.grant ?? null, decision };
  return { ...(options as T), [APPROVED]: approval };
}

/**
 * The approval a gated tool runs under, read from what its `execute` was given: the AI SDK's and
 * Mastra 1.x's second argument, Mastra 0.24's first. `undefined` outside `impriTool` / `gateMastraTool`.
 */
export function impriApproval(options: unknown): Approval | undefined {
  return options && typeof options === "object" ? (options as { [APPROVED]?: Approval })[APPROVED] : undefined;
}

/** What the model is told when a call is declined: the reviewer's words, or what happened. */
export function declineReason(decision: Decision): string {
  if (decision.status === "approved") return "approved with changes this tool cannot apply: not run";
  const said = decision.note ? `: ${decision.note}` : "";
  return `not approved by a reviewer (${decision.status}${decision.reason ? `, ${decision.reason}` : ""})${said}`;
}

/** The action of a tool call no adapter was told about: kind `tool.<name>`, the call as title. */
export function toolAction(toolName: string, args: JsonObject): ActionSpec {
  return { kind: `tool.${toolName.toLowerCase().replace(/[^a-z0-9_-]+/g, "_")}`, title: `${toolName}(${JSON.stringify(args)})`.slice(0, 200) };
}

export function actionFor<I extends JsonObject>(spec: ActionSpecFor<I>, input: I): ActionIn {
  const resolved = typeof spec === "function" ? spec(input) : spec;
  const { preview, ...rest } = resolved;
  return {
    ...rest,
    preview: preview ?? { format: "json", body: JSON.stringify(input, null, 2) },
    payload: input,
  };
}

/**
 * Push `input` as an action, wait for the decision, and only if it is approved call
 * `run(approvedPayload, decision)` (the payload a reviewer may have edited, never `input`);
 * report `executed` with its value as `detail` (or `failed` with the error, then rethrow).
 * Anything but approval throws an `ActionNotApproved` subclass and runs nothing.
 */
export async function gate<I extends JsonObject, O>(
  impri: Impri,
  input: I,
  options: GateOptions<I>,
  run: (payload: I, decision: Decision) => Promise<O> | O,
): Promise<O> {
  const action = await impri.push(actionFor(options.action, input), {
    idempotencyKey: options.idempotencyKey,
    signal: options.signal,
  });
  const decision = await impri.awaitDecision(action.action_id, { timeoutS: options.timeoutS, signal: options.signal });
  if (decision.status === "pending") throw new DecisionTimeout(action.action_id, options.timeoutS ?? 0);
  if (decision.status === "executed" || decision.status === "failed") throw new AlreadySettled(decision);
  if (decision.status !== "approved") throw notApproved(decision);
  let value: O;
  try {
    value = await run(decision.payload as I, decision);
  } catch (error) {
    await report(impri, decision, "failed", { error: error instanceof Error ? error.message : String(error) }, undefined);
    throw error;
  }
  await report(impri, decision, "executed", detailOf(value), value, options.reference?.(value) ?? undefined);
  return value;
}

/** What a tool returned, as a result's `detail`: text or an object as is, anything else as `{value}`. */
export function detailOf(value: unknown): JsonObject | string | null {
  if (value === undefined || value === null) return null;
  if (typeof value === "string") return value;
  if (typeof value === "object" && !Array.isArray(value)) return JSON.parse(JSON.stringify(value)) as JsonObject;
  return { value: JSON.parse(JSON.stringify(value)) };
}

async function report(
  impri: Impri,
  decision: Decision,
  status: "executed" | "failed",
  detail: JsonObject | string | null,
  value: unknown,
  reference?: string,
): Promise<void> {
  try {
    await impri.reportResult(decision.action_id, { status, detail, grant: decision.grant ?? undefined, reference });
  } catch (error) {
    throw new ResultNotReported(decision.action_id, status, value, error);
  }
}
