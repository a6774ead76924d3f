// `npm run typecheck`: every ```ts block of README.md (and of docs/agents.md: fragments, given
// DOCS_HEADER's imports) becomes a module of build-readme/<variant>/,
// compiled strict (tsc --noEmit) against the real packages: variant "ai6-mastra0" as written
// (`ai` 6, `@mastra/core` 0.24), variant "ai7-mastra1" with the imports moved to the aliases
// `ai7` and `mastra1`. A block whose first line is `// @mastra/core 1.x` or `// @mastra/core 0.24`
// is checked against that major only. prelude.d.ts declares what the blocks leave to the reader
// (a model, a ticket, Stripe, a payments service).
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const tsBlocks = (text) => [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
const DOCS_HEADER = `import { tool } from "ai";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";
import { Impri, answerToolApprovals, gateMastraTool, impriApproval, impriTool } from "@impri/client";
declare const impri: Impri;
`;
const readmeBlocks = tsBlocks(readFileSync(join(root, "README.md"), "utf8"));
const docsBlocks = tsBlocks(readFileSync(join(root, "../../docs/agents.md"), "utf8"));
if (readmeBlocks.length < 4 || docsBlocks.length < 2) throw new Error("README.md or docs/agents.md: fewer TypeScript blocks than the examples");
const withMarker = (code, body) => (code.match(/^\/\/ @mastra\/core (1\.x|0\.24)\n/)?.[0] ?? "") + body;
const blocks = [...readmeBlocks, ...docsBlocks.map((code) => withMarker(code, DOCS_HEADER + code))];

const prelude = (ai) => `
declare const model: import("${ai}").LanguageModel;
declare const ticket: string;
declare const stripe: {
  refunds: {
    create(
      params: { payment_intent: string; amount: number; metadata: Record<string, string> },
      options?: { idempotencyKey?: string },
    ): Promise<{ id: string; status: string | null }>;
  };
};
declare const payments: { refund(payload: { [key: string]: unknown }): Promise<{ refund_id: string; amount_cents: number }> };
`;

const variants = [
  { name: "ai6-mastra0", mastra: "0.24", rewrite: (code) => code },
  {
    name: "ai7-mastra1",
    mastra: "1.x",
    rewrite: (code) => code.replace(/from "ai"/g, 'from "ai7"').replace(/from "@mastra\/core((?:\/[a-z-]+)?)"/g, 'from "mastra1$1"'),
  },
];
const dir = join(root, "build-readme");
rmSync(dir, { recursive: true, force: true });
let failed = false;
for (const variant of variants) {
  const out = join(dir, variant.name);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "prelude.d.ts"), prelude(variant.name.startsWith("ai7") ? "ai7" : "ai"));
  const files = ["prelude.d.ts"];
  blocks.forEach((code, i) => {
    const only = code.match(/^\/\/ @mastra\/core (1\.x|0\.24)\n/);
    if (only && only[1] !== variant.mastra) return;
    const file = `example${i + 1}.mts`; // always ESM: top-level await, and "@impri/client" is this package
    writeFileSync(join(out, file), `${variant.rewrite(code)}\nexport {};\n`);
    files.push(file);
  });
  const args = ["--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
    "--lib", "es2023,dom", "--types", "node", "--skipLibCheck", ...files];
  try {
    execFileSync(join(root, "node_modules/.bin/tsc"), args, { cwd: out, stdio: "inherit" });
    console.log(`README.md, docs/agents.md: ${files.length - 1} TypeScript blocks type-check against ${variant.name}`);
  } catch {
    console.error(`README.md, docs/agents.md: the blocks above do not type-check against ${variant.name} (files in ${out})`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
