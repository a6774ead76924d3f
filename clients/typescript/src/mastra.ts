/**
 * Mastra (`@mastra/core`): Impri answers `requireToolApproval`, and tools run only with what was approved.
 *
 * - `gateMastraTool(impri, tool, {action})`: the tool's `execute` runs only after approval, with the
 *   approved (possibly edited) arguments, and its result is reported. Works on its own.
 * - `answerToolApprovals(impri, agent, stream)`: the `requireToolApproval` hook. Reads the stream of
 *   `agent.stream(…, { requireToolApproval: true })`; for each `tool-call-approval` it pushes the call
 *   to Impri, waits, and answers with `agent.approveToolCall` or `agent.declineToolCall`, until the run
 *   ends. Mastra resumes an approved call with the model's own arguments, so an approval a reviewer
 *   edited is applied only to a tool wrapped by `gateMastraTool` (its `execute` picks up the same
 *   action, by its idempotency key, and runs the approved payload); for any other tool such an approval
 *   is declined and nothing runs.
 * No import of `@mastra/core` here: these work on the objects' shapes.
 */
import type { Impri } from "./client.js";
import { actionFor, gate, type ActionSpec, type ActionSpecFor } from "./gate.js";
import { ActionNotApproved } from "./errors.js";
import { notApprovedResult } from "./ai.js";
import type { Decision, JsonObject } from "./types.js";

const GATED = Symbol.for("impri.gated");

interface GateMark {
  action: ActionSpecFor<JsonObject>;
}

export interface MastraToolOptions<I> {
  action: ActionSpecFor<I>;
  timeoutS?: number;
  onNotApproved?: (error: ActionNotApproved) => unknown;
}

interface MastraTool {
  id?: string;
  execute?: (context: { context: any; [key: string]: unknown }, options?: { toolCallId?: string; abortSignal?: AbortSignal; [key: string]: unknown }) => Promise<any>;
}

function keyFor(spec: ActionSpecFor<JsonObject>, input: JsonObject, toolCallId: string): string {
  return `${(typeof spec === "function" ? spec(input) : spec).kind}:${toolCallId}`;
}

/** A copy of the Mastra tool whose `execute` is gated behind Impri. */
export function gateMastraTool<T extends MastraTool>(impri: Impri, tool: T, options: MastraToolOptions<any>): T {
  const execute = tool.execute;
  if (typeof execute !== "function") throw new TypeError("gateMastraTool needs a tool with an execute function");
  const spec = options.action as ActionSpecFor<JsonObject>;
  const gated = Object.assign(Object.create(Object.getPrototypeOf(tool)), tool) as T & { [GATED]: GateMark };
  gated.execute = async (context, callOptions) => {
    const input = context.context as JsonObject;
    const toolCallId = callOptions?.toolCallId;
    if (!toolCallId) throw new TypeError("Mastra passed no toolCallId: cannot key the action");
    try {
      return await gate(
        impri,
        input,
        { action: spec, idempotencyKey: keyFor(spec, input, toolCallId), timeoutS: options.timeoutS, signal: callOptions?.abortSignal },
        (payload) => execute.call(tool, { ...context, context: payload }, callOptions),
      );
    } catch (error) {
      if (error instanceof ActionNotApproved) return (options.onNotApproved ?? notApprovedResult)(error);
      throw error;
    }
  };
  gated[GATED] = { action: spec };
  return gated;
}

interface Chunk {
  type: string;
  runId?: string;
  payload?: any;
}

interface MastraStream {
  runId?: string;
  fullStream: AsyncIterable<Chunk> | ReadableStream<Chunk>;
}

interface MastraAgent<S extends MastraStream> {
  getTools?: (options?: any) => Promise<Record<string, unknown>> | Record<string, unknown>;
  approveToolCall(options: { runId: string; toolCallId?: string; [key: string]: unknown }): Promise<S>;
  declineToolCall(options: { runId: string; toolCallId?: string; [key: string]: unknown }): Promise<S>;
}

export interface ApprovalOptions {
  /** The action for a tool that is not wrapped by `gateMastraTool`. Default: kind `tool.<name>`. */
  action?: (toolName: string, args: JsonObject) => ActionSpec;
  timeoutS?: number;
  /** Every chunk of every stream of the run, as it passes (to show text, tool results…). */
  onChunk?: (chunk: Chunk) => void;
  /** Each decision Impri made for a tool call. */
  onDecision?: (decision: Decision, toolName: string) => void;
  /** Passed on to `approveToolCall` / `declineToolCall` (e.g. memory, runtimeContext). */
  resumeOptions?: Record<string, unknown>;
}

export interface ApprovalRun<S> {
  /** The last stream of the run (already read). */
  stream: S;
  /** Text of every stream of the run. */
  text: string;
  decisions: Decision[];
}

function defaultAction(toolName: string, args: JsonObject): ActionSpec {
  return { kind: `tool.${toolName.toLowerCase().replace(/[^a-z0-9_-]+/g, "_")}`, title: `${toolName}(${JSON.stringify(args)})`.slice(0, 200) };
}

/** The `requireToolApproval` hook: answer every tool-call approval of a Mastra run with Impri's decision. */
export async function answerToolApprovals<S extends MastraStream>(
  impri: Impri,
  agent: MastraAgent<S>,
  stream: S,
  options: ApprovalOptions = {},
): Promise<ApprovalRun<S>> {
  const tools = (await agent.getTools?.()) ?? {};
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
        pending = { runId: chunk.runId ?? current.runId ?? "", ...chunk.payload };
      }
      if (chunk.type === "tool-result" && unwrappedRuns.has(chunk.payload?.toolCallId)) {
        const decision = unwrappedRuns.get(chunk.payload.toolCallId)!;
        unwrappedRuns.delete(chunk.payload.toolCallId);
        const result = chunk.payload?.result;
        const detail = typeof result === "string" ? result : result && typeof result === "object" && !Array.isArray(result) ? result : { value: result ?? null };
        await impri.reportResult(decision.action_id, { status: chunk.payload?.isError ? "failed" : "executed", detail, grant: decision.grant });
      }
    }
    if (!pending) return { stream: current, text, decisions };
    const tool = tools[pending.toolName] as { [GATED]?: GateMark } | undefined;
    const mark = tool?.[GATED];
    const spec: ActionSpecFor<JsonObject> = mark?.action ?? ((args: JsonObject) => (options.action ?? defaultAction)(pending!.toolName, args));
    const action = await impri.push(actionFor(spec, pending.args), { idempotencyKey: keyFor(spec, pending.args, pending.toolCallId) });
    const decision = await impri.awaitDecision(action.action_id, { timeoutS: options.timeoutS });
    decisions.push(decision);
    options.onDecision?.(decision, pending.toolName);
    const answer = { ...options.resumeOptions, runId: pending.runId, toolCallId: pending.toolCallId };
    if (decision.status === "approved" && (mark || !decision.edited_by_human)) {
      if (!mark) unwrappedRuns.set(pending.toolCallId, decision);
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
      current = await agent.declineToolCall(answer);
    }
  }
}
