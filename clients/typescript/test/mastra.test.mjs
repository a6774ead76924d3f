// Mastra's requireToolApproval answered by Impri, with the real @mastra/core and a scripted model
// against impri serve: the tool runs once with the approved arguments, never on rejection.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { InMemoryStore } from "@mastra/core/storage";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

import { Impri, answerToolApprovals, gateMastraTool } from "../dist/index.js";
import { live, unique } from "./server.mjs";

const { url, agentKey, rita } = live();
const impri = new Impri({ baseUrl: url, apiKey: agentKey });
const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

/** A language model (AI SDK spec v2, what Mastra runs) that calls `refund` once, then repeats the tool's answer. */
function scriptedModel(toolCallId, args) {
  let calls = 0;
  const stream = (parts) => ({ stream: new ReadableStream({ start(c) { parts.forEach((p) => c.enqueue(p)); c.close(); } }) });
  return {
    specificationVersion: "v2",
    provider: "scripted",
    modelId: "scripted",
    supportedUrls: {},
    async doGenerate() {
      throw new Error("the scripted model only streams");
    },
    async doStream(options) {
      calls += 1;
      if (calls === 1) {
        return stream([
          { type: "stream-start", warnings: [] },
          { type: "tool-call", toolCallId, toolName: "refund", input: JSON.stringify(args) },
          { type: "finish", finishReason: "tool-calls", usage },
        ]);
      }
      const result = options.prompt.at(-1).content.find((p) => p.type === "tool-result");
      return stream([
        { type: "stream-start", warnings: [] },
        { type: "text-start", id: "t" },
        { type: "text-delta", id: "t", delta: `tool said: ${JSON.stringify(result.output.value)}` },
        { type: "text-end", id: "t" },
        { type: "finish", finishReason: "stop", usage },
      ]);
    },
  };
}

function setUp({ gated, args }) {
  const title = unique("Mastra refund");
  const calls = [];
  let refund = createTool({
    id: "refund",
    description: "Refund an order. A human reviews it first and may lower the amount.",
    inputSchema: z.object({ order_id: z.string(), amount_cents: z.number().int(), currency: z.string() }),
    execute: async ({ context }) => {
      calls.push(context);
      return { refund_id: `re_${calls.length}`, amount_cents: context.amount_cents };
    },
  });
  const action = () => ({ kind: "payment.refund", title, editable: ["payload.amount_cents"] });
  if (gated) refund = gateMastraTool(impri, refund, { action });
  const model = scriptedModel(unique("call").replace(" ", "-"), args);
  const mastra = new Mastra({
    agents: { support: new Agent({ name: "support", instructions: "Resolve refund tickets.", model, tools: { refund } }) },
    storage: new InMemoryStore(),
    logger: false,
  });
  return { agent: mastra.getAgent("support"), title, calls, options: gated ? {} : { action } };
}

const ARGS = { order_id: "10432", amount_cents: 8400, currency: "USD" };

test("approved with an edit: the gated tool runs once with the reviewer's amount, and the result is reported", { timeout: 60_000 }, async () => {
  const { agent, title, calls, options } = setUp({ gated: true, args: ARGS });
  const reviewing = rita.pendingTitled(title).then(async (action) => {
    await rita.approve(action.action_id, { "payload.amount_cents": 5000 });
    return action;
  });
  const stream = await agent.stream("Refund order 10432", { requireToolApproval: true });
  const run = await answerToolApprovals(impri, agent, stream, options);
  const action = await reviewing;
  assert.deepEqual(calls, [{ ...ARGS, amount_cents: 5000 }]);
  assert.equal(run.decisions.length, 1);
  assert.equal(run.decisions[0].status, "approved");
  assert.equal(run.text, 'tool said: {"refund_id":"re_1","amount_cents":5000}');
  const settled = await impri.get(action.action_id);
  assert.equal(settled.status, "executed");
  assert.deepEqual(settled.result.detail, { refund_id: "re_1", amount_cents: 5000 });
  const page = await impri.list({ limit: 200 });
  assert.equal(page.items.filter((a) => a.title === title).length, 1, "the hook and the tool share one action");
});

test("rejected: the tool never runs", { timeout: 60_000 }, async () => {
  const { agent, title, calls, options } = setUp({ gated: true, args: ARGS });
  const reviewing = rita.pendingTitled(title).then((a) => rita.reject(a.action_id, "over the limit", "policy"));
  const stream = await agent.stream("Refund order 10432", { requireToolApproval: true });
  const run = await answerToolApprovals(impri, agent, stream, options);
  await reviewing;
  assert.deepEqual(calls, []);
  assert.equal(run.decisions[0].status, "rejected");
  assert.match(run.text, /not approved/);
});

test("a tool not gated itself: approved as proposed runs once and is reported; an edited approval runs nothing", { timeout: 60_000 }, async () => {
  const plain = setUp({ gated: false, args: ARGS });
  const approving = rita.pendingTitled(plain.title).then(async (a) => (await rita.approve(a.action_id), a));
  let run = await answerToolApprovals(impri, plain.agent, await plain.agent.stream("Refund", { requireToolApproval: true }), plain.options);
  const action = await approving;
  assert.deepEqual(plain.calls, [ARGS]);
  assert.equal(run.decisions[0].status, "approved");
  const settled = await impri.get(action.action_id);
  assert.equal(settled.status, "executed");
  assert.deepEqual(settled.result.detail, { refund_id: "re_1", amount_cents: 8400 });

  const edited = setUp({ gated: false, args: ARGS });
  const editing = rita.pendingTitled(edited.title).then(async (a) => (await rita.approve(a.action_id, { "payload.amount_cents": 100 }), a));
  run = await answerToolApprovals(impri, edited.agent, await edited.agent.stream("Refund", { requireToolApproval: true }), edited.options);
  const editedAction = await editing;
  assert.deepEqual(edited.calls, [], "Mastra would run the model's own arguments: declined instead");
  assert.equal(run.decisions[0].edited_by_human, true);
  const failed = await impri.get(editedAction.action_id);
  assert.equal(failed.status, "failed");
  assert.match(failed.result.detail, /not run/);
});

test("gateMastraTool alone (no requireToolApproval): the tool waits on Impri and runs the approved arguments", { timeout: 60_000 }, async () => {
  const { agent, title, calls } = setUp({ gated: true, args: ARGS });
  const reviewing = rita.pendingTitled(title).then((a) => rita.approve(a.action_id, { "payload.amount_cents": 4200 }));
  const stream = await agent.stream("Refund order 10432");
  const text = await stream.text;
  await reviewing;
  assert.deepEqual(calls, [{ ...ARGS, amount_cents: 4200 }]);
  assert.equal(text, 'tool said: {"refund_id":"re_1","amount_cents":4200}');
});
