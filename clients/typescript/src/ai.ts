/**
 * Vercel AI SDK (`ai` 6 and 7): gate a tool's `execute` behind Impri.
 *
 *   const refund = impriTool(impri, tool({ inputSchema, execute }), {
 *     action: (input) => ({ kind: "payment.refund", title: `Refund order ${input.order_id}`,
 *                           editable: ["payload.amount_cents"] }),
 *   });
 *
 * The model's arguments become the action's payload; the tool's own `execute` runs once,
 * only after approval, with the approved (possibly edited) arguments, and its result is
 * reported to Impri. Anything but approval runs nothing and tells the model why.
 * The SDK's own approval flow (`needsApproval`) is answered by `answerAiApprovals` (ai-approvals.ts).
 * No import of `ai` here: the wrapper works on any tool object with `execute(input, options)`.
 */
import type { Impri } from "./client.js";
import { ActionNotApproved } from "./errors.js";
import { gate, withApproval, type ActionSpecFor } from "./gate.js";
import type { JsonObject } from "./types.js";

/** What the AI SDK passes a tool's `execute` (the parts used here). */
export interface ToolCallOptions {
  toolCallId: string;
  abortSignal?: AbortSignal;
}

/** A tool with an `execute(input, options)`, as `tool({...})` of `ai` 6 or 7 makes it. */
export interface ExecutableTool {
  execute?: (input: any, options: any) => unknown;
}

/** The input type of a tool's `execute`. */
export type ToolInput<T extends ExecutableTool> = Parameters<NonNullable<T["execute"]>>[0];

export interface ImpriToolOptions<I> {
  /** The action each call becomes (its payload is the call's input). */
  action: ActionSpecFor<I>;
  /** Default: `<kind>:<toolCallId>`, so a re-run step finds the same action. */
  idempotencyKey?: (input: I, options: ToolCallOptions) => string;
  /** Give up waiting after this many seconds (a `DecisionTimeout` the SDK reports as a tool error). */
  timeoutS?: number;
  /** What the model is told when the action is not approved. Default: `{approved: false, status, note, reason}`. */
  onNotApproved?: (error: ActionNotApproved) => unknown;
}

export interface NotApprovedResult {
  approved: false;
  status: string;
  note: string;
  reason: string | null;
}

export function notApprovedResult(error: ActionNotApproved): NotApprovedResult {
  return { approved: false, status: error.status, note: error.note, reason: error.reason };
}

export const AI_GATED = Symbol.for("impri.ai.gated");

/** What `impriTool` leaves on the tool for `answerAiApprovals`: the action a call becomes, and its key. */
export interface AiGateMark {
  action: ActionSpecFor<JsonObject>;
  key: (input: JsonObject, options: ToolCallOptions) => string;
}

function kindOf<I>(spec: ActionSpecFor<I>, input: I): string {
  return (typeof spec === "function" ? spec(input) : spec).kind;
}

/** The tool, with `execute` gated behind Impri (same type, so it drops into `tools: {…}`). */
export function impriTool<T extends ExecutableTool>(impri: Impri, tool: T, options: ImpriToolOptions<ToolInput<T>>): T {
  const execute = tool.execute;
  if (typeof execute !== "function") throw new TypeError("impriTool needs a tool with an execute function");
  const spec = options.action as ActionSpecFor<JsonObject>;
  const key = (input: JsonObject, call: ToolCallOptions) =>
    options.idempotencyKey?.(input as ToolInput<T>, call) ?? `${kindOf(spec, input)}:${call.toolCallId}`;
  const gatedExecute = async (input: JsonObject, call: ToolCallOptions) => {
    try {
      return await gate(
        impri,
        input,
        { action: spec, idempotencyKey: key(input, call), timeoutS: options.timeoutS, signal: call.abortSignal },
        (payload, decision) => execute.call(tool, payload, withApproval(call, decision)) as PromiseLike<unknown>,
      );
    } catch (error) {
      if (error instanceof ActionNotApproved) return (options.onNotApproved ?? notApprovedResult)(error);
      throw error;
    }
  };
  const mark: AiGateMark = { action: spec, key };
  return { ...tool, execute: gatedExecute, [AI_GATED]: mark } as T;
}
