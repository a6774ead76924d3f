/**
 * The AI SDK's own tool approval (`ai` 6 and 7: a tool with `needsApproval`), answered by Impri.
 *
 *   const messages: ModelMessage[] = [{ role: "user", content: ticket }];
 *   const run = await withImpriApprovals(impri, { tools, messages }, (messages) =>
 *     generateText({ model, tools, messages, stopWhen: stepCountIs(5) }));
 *
 * Each step's `tool-approval-request` becomes an action (for a tool wrapped by `impriTool`, the
 * tool's own action and key); the decision goes back as the SDK's `tool-approval-response`, and
 * the step runs again, until a step asks for no approval. A tool wrapped by `impriTool` is always
 * approved to the SDK: its `execute` finds the same action and enforces the decision (edits
 * applied, the reviewer's note returned to the model). Any other tool runs only when approved
 * as proposed (the SDK runs the model's own arguments) and its result is reported; otherwise the
 * SDK is told "denied" with the reviewer's note as the reason, which the model reads, and an
 * approval with edits is reported `failed` (not run).
 */
import type { Impri } from "./client.js";
import { actionFor, declineReason, detailOf, toolAction, type ActionSpec, type ActionSpecFor } from "./gate.js";
import { AI_GATED, type AiGateMark } from "./ai.js";
import type { Decision, JsonObject } from "./types.js";

/** The parts of a `generateText` / `streamText` result read here (both majors). */
export interface StepResultLike {
  content: PromiseLike<readonly any[]> | readonly any[];
  response: PromiseLike<{ messages: readonly any[] }> | { messages: readonly any[] };
  /** ai 7: the step's messages, with the tool results of approved calls it ran first (ai 6 has them in `response`). */
  responseMessages?: PromiseLike<readonly any[]> | readonly any[];
}

/** The messages a step added to the conversation, in either major. */
export async function stepMessages(result: StepResultLike): Promise<any[]> {
  return [...((await result.responseMessages) ?? (await result.response).messages)];
}

export interface AiApprovalOptions {
  /** The action for a tool not wrapped by `impriTool`. Default: kind `tool.<name>`. */
  action?: (toolName: string, input: JsonObject) => ActionSpec;
  timeoutS?: number;
  onDecision?: (decision: Decision, toolName: string) => void;
}

/** One step's answers: the tool message to append (or null: nothing asked), and the decisions. */
export interface AiApprovalAnswer {
  message: { role: "tool"; content: any[] } | null;
  decisions: Decision[];
}

export interface AiApprovalRun<R> {
  /** The last step's result. */
  result: R;
  /** The conversation: the given messages, every step's response messages and the approval answers. */
  messages: any[];
  decisions: Decision[];
}

/**
 * Answer the approval requests of one step. `ran` holds the calls of tools not wrapped by
 * `impriTool` that were approved, until their result is reported (pass the same map each step).
 */
export async function answerAiApprovals(
  impri: Impri,
  result: StepResultLike,
  tools: Record<string, unknown>,
  options: AiApprovalOptions = {},
  ran: Map<string, Decision> = new Map(),
): Promise<AiApprovalAnswer> {
  // An approved call runs at the start of the next step: its result is in the response's tool messages.
  for (const message of await stepMessages(result)) {
    if (message.role !== "tool" || !Array.isArray(message.content)) continue;
    for (const part of message.content) {
      if (part.type !== "tool-result" || !ran.has(part.toolCallId)) continue;
      const decision = ran.get(part.toolCallId)!;
      ran.delete(part.toolCallId);
      const output = part.output ?? {};
      const failed = output.type === "error-text" || output.type === "error-json";
      const detail = failed ? { error: JSON.parse(JSON.stringify(output.value ?? null)) } : detailOf(output.value);
      await impri.reportResult(decision.action_id, { status: failed ? "failed" : "executed", detail, grant: decision.grant });
    }
  }
  const requests = (await result.content).filter((part) => part.type === "tool-approval-request");
  const content: any[] = [];
  const decisions: Decision[] = [];
  for (const request of requests) {
    const { toolCallId, toolName, input } = request.toolCall as { toolCallId: string; toolName: string; input: JsonObject };
    const mark = (tools[toolName] as { [AI_GATED]?: AiGateMark } | undefined)?.[AI_GATED];
    const spec: ActionSpecFor<JsonObject> = mark?.action ?? ((args: JsonObject) => (options.action ?? toolAction)(toolName, args));
    const kind = (typeof spec === "function" ? spec(input) : spec).kind;
    const key = mark ? mark.key(input, { toolCallId }) : `${kind}:${toolCallId}`;
    const action = await impri.push(actionFor(spec, input), { idempotencyKey: key });
    const decision = await impri.awaitDecision(action.action_id, { timeoutS: options.timeoutS });
    decisions.push(decision);
    options.onDecision?.(decision, toolName);
    const approved = !!mark || (decision.status === "approved" && !decision.edited_by_human);
    if (!mark && approved) ran.set(toolCallId, decision);
    if (!mark && decision.status === "approved" && decision.edited_by_human) {
      await impri.reportResult(decision.action_id, {
        status: "failed",
        detail: "not run: the approval changed the arguments, and this tool is not wrapped by impriTool",
        grant: decision.grant,
      });
    }
    const answer: Record<string, unknown> = { type: "tool-approval-response", approvalId: request.approvalId, approved };
    if (!approved) answer.reason = declineReason(decision);
    if (request.signature) answer.signature = request.signature; // ai 7 with experimental_toolApprovalSecret
    content.push(answer);
  }
  return { message: content.length ? { role: "tool", content } : null, decisions };
}

/** Run `step` until no step asks for approval, answering each request with Impri's decision. */
export async function withImpriApprovals<R extends StepResultLike>(
  impri: Impri,
  run: { tools: Record<string, unknown>; messages: any[] },
  step: (messages: any[]) => PromiseLike<R> | R,
  options: AiApprovalOptions = {},
): Promise<AiApprovalRun<R>> {
  const messages = [...run.messages];
  const decisions: Decision[] = [];
  const ran = new Map<string, Decision>();
  for (;;) {
    const result = await step([...messages]);
    messages.push(...(await stepMessages(result)));
    const answer = await answerAiApprovals(impri, result, run.tools, options, ran);
    decisions.push(...answer.decisions);
    if (!answer.message) return { result, messages, decisions };
    messages.push(answer.message);
  }
}
