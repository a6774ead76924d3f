// Mastra against impri serve with a scripted model, for one major of `@mastra/core` (mastra1.test.ts
// and mastra0.test.ts pass theirs in, with tools built by its own createTool and gated by
// gateMastraTool): requireToolApproval answered by Impri, and gateMastraTool alone. Each approval
// runs the tool exactly once, with the approved (possibly edited) arguments.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Impri, answerToolApprovals } from "@impri/client";
import { live, unique } from "./server.js";

export const { url, agentKey, rita } = live();
export const impri = new Impri({ baseUrl: url, apiKey: agentKey });

export interface RefundInput {
  order_id: string;
  amount_cents: number;
  currency: string;
}

export const ARGS: RefundInput = { order_id: "10432", amount_cents: 8400, currency: "USD" };

export interface Setup {
  agent: any;
  /** Every execution of the tool's own `execute`, with its arguments. */
  calls: RefundInput[];
  /** `impriApproval(…)?.actionId` in each execution: what the tool would give the processor. */
  actionIds: (string | undefined)[];
  /** The tool as the agent has it (gated or not). */
  tool: any;
}

export interface MastraKit {
  label: string;
  v1: boolean;
  /** An agent with `{ refund }` (gated with kind payment.refund and `title`, or not) and a scripted model. */
  setUp(options: { title: string; gated: boolean; toolCallId: string }): Setup;
}

const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

/** A language model (AI SDK spec v2, which both majors run) that calls `refund` once, then repeats the tool's answer. */
export function scriptedModel(toolCallId: string, args: RefundInput) {
  const stream = (parts: object[]) => ({
    stream: new ReadableStream({
      start(c) {
        parts.forEach((p) => c.enqueue(p));
        c.close();
      },
    }),
  });
  return {
    specificationVersion: "v2" as const,
    provider: "scripted",
    modelId: "scripted",
    supportedUrls: {},
    async doGenerate(): Promise<never> {
      throw new Error("the scripted model only streams");
    },
    async doStream(options: { prompt: any[] }) {
      const last = options.prompt.at(-1);
      const result = last?.role === "tool" ? last.content.find((p: any) => p.type === "tool-result") : undefined;
      if (!result) {
        return stream([
          { type: "stream-start", warnings: [] },
          { type: "tool-call", toolCallId, toolName: "refund", input: JSON.stringify(args) },
          { type: "finish", finishReason: "tool-calls", usage },
        ]);
      }
      const said = result.output.type === "json" ? JSON.stringify(result.output.value) : String(result.output.value ?? result.output.reason);
      return stream([
        { type: "stream-start", warnings: [] },
        { type: "text-start", id: "t" },
        { type: "text-delta", id: "t", delta: `tool said: ${said}` },
        { type: "text-end", id: "t" },
        { type: "finish", finishReason: "stop", usage },
      ]);
    },
  };
}

const callId = () => unique("call").replace(" ", "-");

async function only(title: string) {
  const page = await impri.list({ limit: 200 });
  const matching = page.items.filter((a) => a.title === title);
  assert.equal(matching.length, 1, `one action titled ${title}`);
  return matching[0];
}

export function mastraCases(kit: MastraKit): void {
  const { label } = kit;

  test(`${label}: requireToolApproval, gated tool approved with an edit: it runs once with the reviewer's amount, the tool's kind, reported`, { timeout: 60_000 }, async () => {
    const title = unique(`${label} refund`);
    const { agent, calls, actionIds } = kit.setUp({ title, gated: true, toolCallId: callId() });
    const reviewing = rita.pendingTitled(title).then((a) => rita.approve(a.action_id, { "payload.amount_cents": 5000 }));
    const stream = await agent.stream("Refund order 10432", { requireToolApproval: true });
    const run = await answerToolApprovals(impri, agent, stream);
    await reviewing;
    assert.deepEqual(calls, [{ ...ARGS, amount_cents: 5000 }], "exactly one execution, with the approved arguments");
    assert.equal(run.decisions.length, 1);
    assert.equal(run.text, 'tool said: {"refund_id":"re_1","amount_cents":5000}');
    const settled = await only(title); // the hook and the tool share one action
    assert.equal(settled.kind, "payment.refund");
    assert.equal(settled.status, "executed");
    assert.deepEqual(settled.result?.detail, { refund_id: "re_1", amount_cents: 5000 });
    assert.deepEqual(actionIds, [settled.action_id], "the tool knows the action it runs under");
  });

  test(`${label}: requireToolApproval, gated tool rejected: it never runs and the model reads the reviewer's note`, { timeout: 60_000 }, async () => {
    const title = unique(`${label} refund to reject`);
    const { agent, calls } = kit.setUp({ title, gated: true, toolCallId: callId() });
    const reviewing = rita.pendingTitled(title).then((a) => rita.reject(a.action_id, "over the limit", "policy"));
    const run = await answerToolApprovals(impri, agent, await agent.stream("Refund", { requireToolApproval: true }));
    await reviewing;
    assert.deepEqual(calls, []);
    assert.equal(run.decisions[0].status, "rejected");
    assert.equal(run.text, 'tool said: {"approved":false,"status":"rejected","note":"over the limit","reason":"policy"}');
  });

  test(`${label}: requireToolApproval, a plain tool: approved as proposed it runs once and is reported; edited, nothing runs`, { timeout: 60_000 }, async () => {
    const title = unique(`${label} plain refund`);
    const action = () => ({ kind: "payment.refund", title });
    const plain = kit.setUp({ title, gated: false, toolCallId: callId() });
    const approving = rita.pendingTitled(title).then((a) => rita.approve(a.action_id));
    await answerToolApprovals(impri, plain.agent, await plain.agent.stream("Refund", { requireToolApproval: true }), { action });
    await approving;
    assert.deepEqual(plain.calls, [ARGS]);
    const settled = await only(title);
    assert.equal(settled.status, "executed");
    assert.deepEqual(settled.result?.detail, { refund_id: "re_1", amount_cents: 8400 });

    const editedTitle = unique(`${label} plain refund, edited`);
    const edited = kit.setUp({ title: editedTitle, gated: false, toolCallId: callId() });
    const editing = rita.pendingTitled(editedTitle).then((a) => rita.approve(a.action_id, { "payload.amount_cents": 100 }));
    const run = await answerToolApprovals(impri, edited.agent, await edited.agent.stream("Refund", { requireToolApproval: true }), {
      action: () => ({ kind: "payment.refund", title: editedTitle, editable: ["payload.amount_cents"] }),
    });
    await editing;
    assert.deepEqual(edited.calls, [], "Mastra would run the model's own arguments: declined instead");
    assert.equal(run.decisions[0].edited_by_human, true);
    // 1.x hands declineToolCall's reason to the model (0.24 says only that it was not approved).
    if (kit.v1) assert.match(run.text, /approved with changes this tool cannot apply/);
    const failed = await only(editedTitle);
    assert.equal(failed.status, "failed");
    assert.match(String(failed.result?.detail), /not run/);
  });

  test(`${label}: gateMastraTool alone: approved with an edit, it runs once with the approved arguments`, { timeout: 60_000 }, async () => {
    const title = unique(`${label} gated alone`);
    const { agent, calls } = kit.setUp({ title, gated: true, toolCallId: callId() });
    const reviewing = rita.pendingTitled(title).then((a) => rita.approve(a.action_id, { "payload.amount_cents": 4200 }));
    const stream = await agent.stream("Refund order 10432");
    const text = await stream.text;
    await reviewing;
    assert.deepEqual(calls, [{ ...ARGS, amount_cents: 4200 }]);
    assert.equal(text, 'tool said: {"refund_id":"re_1","amount_cents":4200}');
    assert.equal((await only(title)).status, "executed");
  });
}
