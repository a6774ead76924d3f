// `ai` 6: the cases of ai-sdk-cases.ts, with tools built by ai 6's own tool() and gated by impriTool.
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { impriApproval, impriTool } from "@impri/client";
import { aiSdkCases, impri, scriptedGenerate, type RefundInput } from "./ai-sdk-cases.js";

aiSdkCases({
  label: "ai 6",
  generateText,
  stepCountIs,
  model: (toolCallId, args) => new MockLanguageModelV3({ doGenerate: scriptedGenerate(toolCallId, args) }),
  refunds({ title, gated, needsApproval }) {
    const calls: RefundInput[] = [];
    const actionIds: (string | undefined)[] = [];
    const refund = tool({
      description: "Refund an order. A human reviews it first and may lower the amount.",
      inputSchema: z.object({ order_id: z.string(), amount_cents: z.number().int(), currency: z.string() }),
      needsApproval,
      execute: async (input, options) => {
        calls.push(input);
        actionIds.push(impriApproval(options)?.actionId);
        return { refund_id: `re_${calls.length}`, amount_cents: input.amount_cents };
      },
    });
    const gatedRefund = impriTool(impri, refund, {
      action: (input) => ({ kind: "payment.refund", title, editable: ["payload.amount_cents"], context: { order: input.order_id } }),
    });
    return { calls, actionIds, tools: { refund: gated ? gatedRefund : refund } };
  },
});
