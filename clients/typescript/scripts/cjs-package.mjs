// After `tsc -p tsconfig.cjs.json`: dist/cjs is CommonJS (its .js and .d.ts), whatever the
// package's own "type" says. A `require("@impri/client")` loads it; jose, which it requires,
// is ESM only: Node 20.19+ and 22.12+ load it with require(esm).
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{ "type": "commonjs" }\n');
