// The Vercel AI SDK adapters against impri serve, with a scripted model, for one major of `ai`
// (ai6.test.ts and ai7.test.ts pass theirs in, with tools built and gated by that major's own
// types): impriTool alone, and the SDK's own approval flow (needsApproval) answered by Impri.
// Each approval runs the tool exactly once, with the approved (possibly edited) arguments.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Impri, withImpriApprovals } from "@impri/client";
import { live, unique } from "./server.js";

export const { url, agentKey, rita } = live();
export const impri = new Impri({ baseUrl: url, apiKey: agentKey });

export interface RefundInput {
  order_id: string;
  amount_cents: number;
  currency: string;
}

export interface Refunds {
  /** Every execution of the tool's own `execute`, with its arguments. */
  calls: RefundInput[];
  /** `impriApproval(options)?.actionId` in each execution: what the tool would give the processor. */
  actionIds: (string | undefined)[];
  tools: Record<string, unknown>;
}

export interface AiSdk {
  label: string;
  generateText(options: any): Promise<any>;
  stepCountIs(count: number): any;
  /** A model that calls `refund` with `args`, then repeats what the tool answered. */
  model(toolCallId: string, args: RefundInput): unknown;
  /** `{ refund }` built with this major's `tool()`; gated with `impriTool` (kind payment.refund, `title`) or not. */
  refunds(options: { title: string; gated: boolean; needsApproval: boolean }): Refunds;
}

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

/** doGenerate of a scripted LanguageModelV3: a tool call, or (after a tool result) the result as text. */
export function scriptedGenerate(toolCallId: string, args: RefundInput) {
  return async (options: { prompt: any[] }) => {
    const last = options.prompt.at(-1);
    const result = last?.role === "tool" ? last.content.find((part: any) => part.type === "tool-result") : undefined;
    if (!result) {
      return {
        content: [{ type: "tool-call" as const, toolCallId, toolName: "refund", input: JSON.stringify(args) }],
        finishReason: { unified: "tool-calls" as const, raw: "tool_calls" },
        usage,
        warnings: [],
      };
    }
    const output = result.output;
    const said = output.type === "execution-denied" ? `denied: ${output.reason}` : JSON.stringify(output.value);
    return {
      content: [{ type: "text" as const, text: `tool said: ${said}` }],
      finishReason: { unified: "stop" as const, raw: "stop" },
      usage,
      warnings: [],
    };
  };
}

export const ARGS: RefundInput = { order_id: "10432", amount_cents: 8400, currency: "USD" };
const callId = () => unique("call").replace(" ", "-");

async function only(title: string) {
  const page = await impri.list({ limit: 200 });
  const matching = page.items.filter((a) => a.title === title);
  assert.equal(matching.length, 1, `one action titled ${title}`);
  return matching[0];
}

export function aiSdkCases(sdk: AiSdk): void {
  const { label } = sdk;

  test(`${label}: impriTool, approved with an edit: execute runs once with the reviewer's amount, and the result is reported`, { timeout: 60_000 }, async () => {
    const title = unique(`${label} refund`);
    const { calls, actionIds, tools } = sdk.refunds({ title, gated: true, needsApproval: false });
    const reviewing = rita.pendingTitled(title).then((a) => rita.approve(a.action_id, { "payload.amount_cents": 5000 }));
    const result = await sdk.generateText({ model: sdk.model(callId(), ARGS), tools, prompt: "Refund order 10432", stopWhen: sdk.stepCountIs(3) });
    await reviewing;
    assert.deepEqual(calls, [{ ...ARGS, amount_cents: 5000 }]);
    assert.equal(result.text, 'tool said: {"refund_id":"re_1","amount_cents":5000}');
    const settled = await only(title);
    assert.equal(settled.kind, "payment.refund");
    assert.equal(settled.status, "executed");
    assert.deepEqual(settled.result?.detail, { refund_id: "re_1", amount_cents: 5000 });
    assert.deepEqual(actionIds, [settled.action_id], "the tool knows the action it runs under");
  });

  test(`${label}: impriTool, rejected: execute never runs and the model reads the reviewer's note`, { timeout: 60_000 }, async () => {
    const title = unique(`${label} refund to reject`);
    const { calls, tools } = sdk.refunds({ title, gated: true, needsApproval: false });
    const reviewing = rita.pendingTitled(title).then((a) => rita.reject(a.action_id, "over the limit", "policy"));
    const result = await sdk.generateText({ model: sdk.model(callId(), ARGS), tools, prompt: "Refund", stopWhen: sdk.stepCountIs(3) });
    await reviewing;
    assert.deepEqual(calls, []);
    assert.equal(result.text, 'tool said: {"approved":false,"status":"rejected","note":"over the limit","reason":"policy"}');
  });

  for (const gated of [true, false]) {
    const which = gated ? "a tool wrapped by impriTool" : "a plain tool";
    test(`${label}: needsApproval answered by Impri, ${which}: approved, it runs once and its result is reported`, { timeout: 60_000 }, async () => {
      const title = unique(`${label} approval`);
      const { calls, tools } = sdk.refunds({ title, gated, needsApproval: true });
      const edits = gated ? { "payload.amount_cents": 5000 } : {};
      const reviewing = rita.pendingTitled(title).then((a) => rita.approve(a.action_id, edits));
      const model = sdk.model(callId(), ARGS);
      const run = await withImpriApprovals(
        impri,
        { tools, messages: [{ role: "user", content: "Refund order 10432" }] },
        (messages) => sdk.generateText({ model, tools, messages, stopWhen: sdk.stepCountIs(3) }),
        { action: () => ({ kind: "payment.refund", title }) },
      );
      await reviewing;
      const amount = gated ? 5000 : 8400;
      assert.deepEqual(calls, [{ ...ARGS, amount_cents: amount }], "exactly one execution, with the approved arguments");
      assert.equal(run.decisions.length, 1);
      assert.equal(run.result.text, `tool said: {"refund_id":"re_1","amount_cents":${amount}}`);
      const settled = await only(title);
      assert.equal(settled.kind, "payment.refund");
      assert.equal(settled.status, "executed");
      assert.deepEqual(settled.result?.detail, { refund_id: "re_1", amount_cents: amount });
    });

    test(`${label}: needsApproval answered by Impri, ${which}: rejected, nothing runs and the model reads the note`, { timeout: 60_000 }, async () => {
      const title = unique(`${label} approval to reject`);
      const { calls, tools } = sdk.refunds({ title, gated, needsApproval: true });
      const reviewing = rita.pendingTitled(title).then((a) => rita.reject(a.action_id, "over the limit", "policy"));
      const model = sdk.model(callId(), ARGS);
      const run = await withImpriApprovals(
        impri,
        { tools, messages: [{ role: "user", content: "Refund order 10432" }] },
        (messages) => sdk.generateText({ model, tools, messages, stopWhen: sdk.stepCountIs(3) }),
        { action: () => ({ kind: "payment.refund", title }) },
      );
      await reviewing;
      assert.deepEqual(calls, []);
      assert.equal(run.decisions[0].status, "rejected");
      assert.match(run.result.text, /over the limit/);
      assert.equal((await only(title)).status, "rejected");
    });
  }
}
