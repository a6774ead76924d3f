// `@mastra/core` 1.x: the cases of mastra-cases.ts with 1.x's own createTool (execute(input, context)),
// and a call keyed without a toolCallId (a tool run outside an agent's tool loop, as a workflow step runs it).
import assert from "node:assert/strict";
import { test } from "node:test";

import { Mastra } from "mastra1";
import { Agent } from "mastra1/agent";
import { InMemoryStore } from "mastra1/storage";
import { createTool } from "mastra1/tools";
import { z } from "zod";

import { gateMastraTool, impriApproval, mastraKey } from "@impri/client";
import { unique } from "./server.js";
import { ARGS, impri, mastraCases, rita, scriptedModel, type RefundInput } from "./mastra-cases.js";

function refundTool(calls: RefundInput[], actionIds: (string | undefined)[] = []) {
  return createTool({
    id: "refund",
    description: "Refund an order. A human reviews it first and may lower the amount.",
    inputSchema: z.object({ order_id: z.string(), amount_cents: z.number().int(), currency: z.string() }),
    execute: async (input, context) => {
      calls.push(input);
      actionIds.push(impriApproval(context)?.actionId);
      return { refund_id: `re_${calls.length}`, amount_cents: input.amount_cents };
    },
  });
}

mastraCases({
  label: "Mastra 1.x",
  v1: true,
  setUp({ title, gated, toolCallId }) {
    const calls: RefundInput[] = [];
    const actionIds: (string | undefined)[] = [];
    const plain = refundTool(calls, actionIds);
    const tool = gated
      ? gateMastraTool(impri, plain, {
          action: (input) => ({ kind: "payment.refund", title, editable: ["payload.amount_cents"], context: { order: input.order_id } }),
        })
      : plain;
    const mastra = new Mastra({
      agents: { support: new Agent({ id: "support", name: "support", instructions: "Resolve refund tickets.", model: scriptedModel(toolCallId, ARGS), tools: { refund: tool } }) },
      storage: new InMemoryStore(),
      logger: false,
    });
    return { agent: mastra.getAgent("support"), calls, actionIds, tool };
  },
});

test("Mastra 1.x: no toolCallId (a workflow step): keyed on the run id and the arguments, one action, one execution", { timeout: 60_000 }, async () => {
  const title = unique("Mastra 1.x workflow refund");
  const calls: RefundInput[] = [];
  const tool = gateMastraTool(impri, refundTool(calls), { action: { kind: "payment.refund", title } });
  const runId = unique("run").replace(" ", "-");
  const context = { runId, requestContext: new Map(), workflow: { runId } } as any;
  const reviewing = rita.pendingTitled(title).then((a) => rita.approve(a.action_id));
  const first = await tool.execute!(ARGS, context);
  await reviewing;
  assert.deepEqual(first, { refund_id: "re_1", amount_cents: 8400 });
  assert.deepEqual(calls, [ARGS]);
  // The same step replayed (a retried workflow) finds the same, settled action: nothing runs again.
  await assert.rejects(tool.execute!(ARGS, context), /already/i);
  assert.equal(calls.length, 1);
  const key = await mastraKey("payment.refund", { toolId: "refund", runId, args: { ...ARGS } });
  assert.match(key, /^mastra:refund:[0-9a-f]{64}$/);
  assert.equal((await impri.list({ limit: 200 })).items.filter((a) => a.title === title)[0].idempotency_key, key);
});
