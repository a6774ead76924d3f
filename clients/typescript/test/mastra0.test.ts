// `@mastra/core` 0.24: the cases of mastra-cases.ts with 0.24's own createTool (execute({ context }, options)).
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { InMemoryStore } from "@mastra/core/storage";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

import { gateMastraTool, impriApproval } from "@impri/client";
import { ARGS, impri, mastraCases, scriptedModel, type RefundInput } from "./mastra-cases.js";

mastraCases({
  label: "Mastra 0.24",
  v1: false,
  setUp({ title, gated, toolCallId }) {
    const calls: RefundInput[] = [];
    const actionIds: (string | undefined)[] = [];
    const plain = createTool({
      id: "refund",
      description: "Refund an order. A human reviews it first and may lower the amount.",
      inputSchema: z.object({ order_id: z.string(), amount_cents: z.number().int(), currency: z.string() }),
      execute: async (execution) => {
        const { context } = execution;
        calls.push(context);
        actionIds.push(impriApproval(execution)?.actionId);
        return { refund_id: `re_${calls.length}`, amount_cents: context.amount_cents };
      },
    });
    const tool = gated
      ? gateMastraTool(impri, plain, {
          action: (input) => ({ kind: "payment.refund", title, editable: ["payload.amount_cents"], context: { order: input.order_id } }),
        })
      : plain;
    const mastra = new Mastra({
      agents: { support: new Agent({ name: "support", instructions: "Resolve refund tickets.", model: scriptedModel(toolCallId, ARGS), tools: { refund: tool } }) },
      storage: new InMemoryStore(),
      logger: false,
    });
    return { agent: mastra.getAgent("support"), calls, actionIds, tool };
  },
});
