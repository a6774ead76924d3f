// The Vercel AI SDK adapter with the real `ai` package and a scripted model against impri serve:
// the tool runs once, with the approved (edited) arguments, and never on rejection.
import assert from "node:assert/strict";
import { test } from "node:test";

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { Impri, impriTool } from "../dist/index.js";
import { live, unique } from "./server.mjs";

const { url, agentKey, rita } = live();
const impri = new Impri({ baseUrl: url, apiKey: agentKey });

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

/** A model that asks for one refund, then answers with what the tool said. */
function scriptedModel(toolCallId, args) {
  const prompts = [];
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      prompts.push(options.prompt);
      if (prompts.length === 1) {
        return {
          content: [{ type: "tool-call", toolCallId, toolName: "refund", input: JSON.stringify(args) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      }
      const last = options.prompt.at(-1);
      const result = last.content.find((part) => part.type === "tool-result");
      return {
        content: [{ type: "text", text: `tool said: ${JSON.stringify(result.output.value)}` }],
        finishReason: { unified: "stop", raw: "stop" },
        usage,
        warnings: [],
      };
    },
  });
  return { model, prompts };
}

function refundTool(title) {
  const calls = [];
  const refund = tool({
    description: "Refund an order. A human reviews it first and may lower the amount.",
    inputSchema: z.object({ order_id: z.string(), amount_cents: z.number().int(), currency: z.string() }),
    execute: async (input) => {
      calls.push(input);
      return { refund_id: `re_${calls.length}`, amount_cents: input.amount_cents };
    },
  });
  const gated = impriTool(impri, refund, {
    action: (input) => ({ kind: "payment.refund", title, editable: ["payload.amount_cents"] }),
  });
  return { gated, calls };
}

test("approved with an edit: execute runs once, with the reviewer's amount, and the result is reported", { timeout: 60_000 }, async () => {
  const title = unique("AI SDK refund");
  const { gated, calls } = refundTool(title);
  const { model } = scriptedModel(unique("call").replace(" ", "-"), { order_id: "10432", amount_cents: 8400, currency: "USD" });
  const reviewing = rita.pendingTitled(title).then(async (action) => {
    assert.deepEqual(action.payload, { order_id: "10432", amount_cents: 8400, currency: "USD" });
    await rita.approve(action.action_id, { "payload.amount_cents": 5000 });
    return action;
  });
  const result = await generateText({ model, tools: { refund: gated }, prompt: "Refund order 10432", stopWhen: stepCountIs(3) });
  const action = await reviewing;
  assert.deepEqual(calls, [{ order_id: "10432", amount_cents: 5000, currency: "USD" }]);
  assert.equal(result.text, 'tool said: {"refund_id":"re_1","amount_cents":5000}');
  const settled = await impri.get(action.action_id);
  assert.equal(settled.status, "executed");
  assert.deepEqual(settled.result.detail, { refund_id: "re_1", amount_cents: 5000 });
});

test("rejected: execute never runs and the model reads the reviewer's note", { timeout: 60_000 }, async () => {
  const title = unique("AI SDK refund to reject");
  const { gated, calls } = refundTool(title);
  const { model } = scriptedModel(unique("call").replace(" ", "-"), { order_id: "10433", amount_cents: 99000, currency: "USD" });
  const reviewing = rita.pendingTitled(title).then((action) => rita.reject(action.action_id, "over the limit", "policy"));
  const result = await generateText({ model, tools: { refund: gated }, prompt: "Refund order 10433", stopWhen: stepCountIs(3) });
  await reviewing;
  assert.deepEqual(calls, []);
  assert.equal(result.text, 'tool said: {"approved":false,"status":"rejected","note":"over the limit","reason":"policy"}');
});
