/**
 * Mastra (`@mastra/core` 1.x and 0.24): tools run only with what a reviewer approved, and Impri
 * answers `requireToolApproval`.
 *
 * - `gateMastraTool(impri, tool, {action})`: the tool's `execute` runs only after approval, with the
 *   approved (possibly edited) arguments, once, and its result is reported. Not approved: it never
 *   runs and the model reads `{approved: false, status, note, reason}`. Works on its own.
 * - `answerToolApprovals(impri, agent, stream)`: the `requireToolApproval` hook. Reads the stream of
 *   `agent.stream(…, { requireToolApproval: true })`; each `tool-call-approval` becomes an action
 *   (for a gated tool, the tool's own action: its kind, title, editable paths), Impri's decision
 *   answers it, until the run ends. A gated tool's call is always resumed: its `execute` finds the
 *   same action and enforces the decision itself (edits applied, the note returned to the model).
 *   Any other tool runs only when approved as proposed (Mastra resumes with the model's own
 *   arguments), and its result is reported; otherwise the call is declined with the reviewer's note
 *   as the reason (Mastra 1.x shows it to the model), and an approval with edits is reported
 *   `failed` (not run).
 *
 * The idempotency key, shared by the hook and the gated tool so both land on one action, is
 * `mastra:<tool id>:<sha256>` of the action's kind, the tool id, and then: the tool call's id and
 * the agent run's id where Mastra gives them (1.x passes both to a tool; 0.24 only the call id,
 * its `runId` is the tool's own run), else the run id and the RFC 8785 JSON of the arguments (a
 * tool run by a workflow step). Nothing to key on: a `TypeError`, unless `idempotencyKey` is given.
 * No import of `@mastra/core` here: these work on the objects' shapes.
 */
import { canonicalJson } from "./canonical.js";
import type { Impri } from "./client.js";
import { ActionNotApproved } from "./errors.js";
import { actionFor, declineReason, detailOf, toolAction, gate, withApproval, type ActionSpec, type ActionSpecFor } from "./gate.js";
import { notApprovedResult } from "./ai.js";
import type { Decision, JsonObject } from "./types.js";

const GATED = Symbol.for("impri.gated");

interface GateMark {
  action: ActionSpecFor<JsonObject>;
  toolId: string;
}

/** What a Mastra tool call is known by: the tool call's id and the agent run's id, when there. */
export interface MastraCall {
  toolId: string;
  toolCallId?: string;
  runId?: string;
  args: JsonObject;
}

export interface MastraToolOptions<I> {
  action: ActionSpecFor<I>;
  timeoutS?: number;
  onNotApproved?: (error: ActionNotApproved) => unknown;
  /** Your own key for a call (default: see the module's comment). */
  idempotencyKey?: (call: MastraCall) => string;
}

type AnyFunction = (...args: any[]) => any;

/** A tool as `createTool` makes it, in either major: an `id` and an `execute`. */
export interface MastraTool {
  id?: string;
  execute?: AnyFunction;
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function kindOf(spec: ActionSpecFor<JsonObject>, args: JsonObject): string {
  return (typeof spec === "function" ? spec(args) : spec).kind;
}

/** The key of a call (the module's comment says what goes in). */
export async function mastraKey(kind: string, call: MastraCall): Promise<string> {
  let basis: unknown[];
  if (call.toolCallId) basis = [kind, call.toolId, "call", call.toolCallId, call.runId ?? null];
  else if (call.runId) basis = [kind, call.toolId, "run", call.runId, call.args];
  else throw new TypeError("Mastra passed neither a toolCallId nor a runId: pass idempotencyKey to key the action");
  return `mastra:${call.toolId.slice(0, 60)}:${await sha256Hex(canonicalJson(basis))}`;
}

/**
 * The two calling conventions: 1.x `execute(input, context)` with `context.agent.toolCallId` and
 * `context.runId`; 0.24 `execute({ context: input, runId, … }, { toolCallId, abortSignal, … })`.
 */
function callOf(first: any, second: any): { args: JsonObject; toolCallId?: string; runId?: string; signal?: AbortSignal; v1: boolean } {
  const v1 = !!second && typeof second === "object" && ("requestContext" in second || "agent" in second || "workflow" in second || "observe" in second);
  if (v1) {
    return {
      args: first as JsonObject,
      toolCallId: second.agent?.toolCallId,
      runId: second.runId ?? second.workflow?.runId,
      signal: second.abortSignal,
      v1,
    };
  }
  return { args: (first?.context ?? {}) as JsonObject, toolCallId: second?.toolCallId, signal: second?.abortSignal, v1 };
}

/** A tool's arguments: 1.x `execute(input, …)`, 0.24 `execute({ context: input, … }, …)`. */
export type MastraInput<T extends MastraTool> =
  Parameters<NonNullable<T["execute"]>>[0] extends infer F ? (F extends { context: infer C; runtimeContext: any } ? C : F) : never;

/** A copy of the Mastra tool whose `execute` is gated behind Impri (same type: drops into `tools: {…}`). */
export function gateMastraTool<T extends MastraTool>(impri: Impri, tool: T, options: MastraToolOptions<MastraInput<T>>): T {
  const execute = tool.execute;
  if (typeof execute !== "function") throw new TypeError("gateMastraTool needs a tool with an execute function");
  const spec = options.action as ActionSpecFor<JsonObject>;
  const toolId = tool.id ?? "tool";
  const gated = Object.assign(Object.create(Object.getPrototypeOf(tool)), tool) as T & { [GATED]: GateMark };
  gated.execute = async (first: any, second: any) => {
    const call = callOf(first, second);
    const described: MastraCall = { toolId, toolCallId: call.toolCallId, runId: call.runId, args: call.args };
    const key = options.idempotencyKey?.(described) ?? (await mastraKey(kindOf(spec, call.args), described));
    try {
      return await gate(impri, call.args, { action: spec, idempotencyKey: key, timeoutS: options.timeoutS, signal: call.signal }, (payload, decision) =>
        call.v1 ? execute.call(tool, payload, withApproval(second, decision)) : execute.call(tool, withApproval({ ...first, context: payload }, decision), second),
      );
    } catch (error) {
      if (error instanceof ActionNotApproved) return (options.onNotApproved ?? notApprovedResult)(error);
      throw error;
    }
  };
  gated[GATED] = { action: spec, toolId };
  return gated;
}

interface Chunk {
  type: string;
  runId?: string;
  payload?: any;
}

interface MastraStream {
  runId?: string;
  fullStream: AsyncIterable<any> | ReadableStream<any>;
}

/** The agent's methods the hook uses (1.x `listTools`, 0.24 `getTools`). */
interface MastraAgent<S extends MastraStream> {
  listTools?: (options?: any) => any;
  getTools?: (options?: any) => any;
  approveToolCall(options: any): Promise<S>;
  declineToolCall(options: any): Promise<S>;
}

export interface ApprovalOptions {
  /** The action for a tool not wrapped by `gateMastraTool`. Default: kind `tool.<name>`. */
  action?: (toolName: string, args: JsonObject) => ActionSpec;
  timeoutS?: number;
  /** Every chunk of every stream of the run, as it passes (to show text, tool results…). */
  onChunk?: (chunk: Chunk) => void;
  /** Each decision Impri made for a tool call. */
  onDecision?: (decision: Decision, toolName: string) => void;
  /** Passed on to `approveToolCall` / `declineToolCall` (e.g. memory, requestContext). */
  resumeOptions?: Record<string, unknown>;
}

export interface ApprovalRun<S> {
  /** The last stream of the run (already read). */
  stream: S;
  /** Text of every stream of the run. */
  text: string;
  decisions: Decision[];
}

/** The `requireToolApproval` hook: answer every tool-call approval of a Mastra run with Impri's decision. */
export async function answerToolApprovals<S extends MastraStream>(
  impri: Impri,
  agent: MastraAgent<S>,
  stream: S,
  options: ApprovalOptions = {},
): Promise<ApprovalRun<S>> {
  const v1 = typeof agent.listTools === "function";
  const tools: Record<string, unknown> = (await (v1 ? agent.listTools!() : agent.getTools?.())) ?? {};
  const decisions: Decision[] = [];
  const unwrappedRuns = new Map<string, Decision>(); // toolCallId -> decision, for a tool not gated itself
  let current = stream;
  let text = "";
  for (;;) {
    let pending: { runId: string; toolCallId: string; toolName: string; args: JsonObject } | null = null;
    for await (const chunk of current.fullStream as AsyncIterable<Chunk>) {
      options.onChunk?.(chunk);
      if (chunk.type === "text-delta") text += chunk.payload?.text ?? "";
      if (chunk.type === "tool-call-approval") {
        const { toolCallId, toolName, args } = chunk.payload ?? {};
        pending = { runId: chunk.runId ?? current.runId ?? "", toolCallId, toolName, args: args ?? {} };
      }
      const callId = chunk.payload?.toolCallId;
      if ((chunk.type === "tool-result" || chunk.type === "tool-error") && unwrappedRuns.has(callId)) {
        const decision = unwrappedRuns.get(callId)!;
        unwrappedRuns.delete(callId);
        const failed = chunk.type === "tool-error" || chunk.payload?.isError;
        const detail = chunk.type === "tool-error" ? { error: String(chunk.payload?.error?.message ?? chunk.payload?.error) } : detailOf(chunk.payload?.result);
        await impri.reportResult(decision.action_id, { status: failed ? "failed" : "executed", detail, grant: decision.grant });
      }
    }
    if (!pending) return { stream: current, text, decisions };
    const call = pending;
    const mark = (tools[call.toolName] as { [GATED]?: GateMark } | undefined)?.[GATED];
    const spec: ActionSpecFor<JsonObject> = mark?.action ?? ((args: JsonObject) => (options.action ?? toolAction)(call.toolName, args));
    // 0.24 gives a tool its own runId, not the agent run's: only 1.x's is part of the key.
    const described: MastraCall = { toolId: mark?.toolId ?? call.toolName, toolCallId: call.toolCallId, runId: v1 ? call.runId : undefined, args: call.args };
    const key = await mastraKey(kindOf(spec, call.args), described);
    const action = await impri.push(actionFor(spec, call.args), { idempotencyKey: key });
    const decision = await impri.awaitDecision(action.action_id, { timeoutS: options.timeoutS });
    decisions.push(decision);
    options.onDecision?.(decision, call.toolName);
    const answer = { ...options.resumeOptions, runId: call.runId, toolCallId: call.toolCallId };
    if (mark) {
      current = await agent.approveToolCall(answer); // the gated execute enforces the decision
    } else if (decision.status === "approved" && !decision.edited_by_human) {
      unwrappedRuns.set(call.toolCallId, decision);
      current = await agent.approveToolCall(answer);
    } else {
      if (decision.status === "approved") {
        // Approved with edits, for a tool Mastra would run with the model's own arguments: nothing runs.
        await impri.reportResult(decision.action_id, {
          status: "failed",
          detail: "not run: the approval changed the arguments, and this tool is not wrapped by gateMastraTool",
          grant: decision.grant,
        });
      }
      current = await agent.declineToolCall({ ...answer, reason: declineReason(decision) });
    }
  }
}
