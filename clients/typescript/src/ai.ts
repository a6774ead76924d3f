/**
 * Vercel AI SDK (`ai`): gate a tool's `execute` behind Impri.
 *
 *   const refund = impriTool(impri, tool({ inputSchema, execute }), {
 *     action: (input) => ({ kind: "payment.refund", title: `Refund order ${input.order_id}`,
 *                           editable: ["payload.amount_cents"] }),
 *   });
 *
 * The model's arguments become the action's payload; the tool's own `execute` runs once,
 * only after approval, with the approved (possibly edited) arguments, and its result is
 * reported to Impri. Anything but approval runs nothing and tells the model why.
 * No import of `ai` here: the wrapper works on any tool object with `execute(input, options)`.
 */
import type { Impri } from "./client.js";
import { ActionNotApproved } from "./errors.js";
import { gate, type ActionSpecFor } from "./gate.js";
import type { JsonObject } from "./types.js";

/** What the AI SDK passes a tool's `execute` (the parts used here). */
export interface ToolCallOptions {
  toolCallId: string;
  abortSignal?: AbortSignal;
  [key: string]: unknown;
}

interface ExecutableTool<I, O> {
  execute?: (input: I, options: ToolCallOptions) => PromiseLike<O> | O | AsyncIterable<O>;
}

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

function kindOf<I>(spec: ActionSpecFor<I>, input: I): string {
  return (typeof spec === "function" ? spec(input) : spec).kind;
}

/** The tool, with `execute` gated behind Impri (same type, so it drops into `tools: {…}`). */
export function impriTool<T extends ExecutableTool<any, any>>(
  impri: Impri,
  tool: T,
  options: ImpriToolOptions<T extends ExecutableTool<infer I, any> ? I : never>,
): T {
  const execute = tool.execute;
  if (typeof execute !== "function") throw new TypeError("impriTool needs a tool with an execute function");
  const gatedExecute = async (input: JsonObject, call: ToolCallOptions) => {
    const key = options.idempotencyKey?.(input as never, call) ?? `${kindOf(options.action, input as never)}:${call.toolCallId}`;
    try {
      return await gate(
        impri,
        input,
        { action: options.action as ActionSpecFor<JsonObject>, idempotencyKey: key, timeoutS: options.timeoutS, signal: call.abortSignal },
        (payload) => execute.call(tool, payload, call) as PromiseLike<unknown>,
      );
    } catch (error) {
      if (error instanceof ActionNotApproved) return (options.onNotApproved ?? notApprovedResult)(error);
      throw error;
    }
  };
  return { ...tool, execute: gatedExecute } as T;
}
