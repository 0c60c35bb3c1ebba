// Lints ../openapi.json with Redocly's CLI (rules: redocly.yaml) and fails
// on any error or warning: `redocly lint` itself fails on errors only, and
// the contract phone developers build on is to stay clean. Clean, it prints
// one line; otherwise Redocly's own report of each problem.
import { spawnSync } from "node:child_process";

const lint = (format) =>
  spawnSync("node_modules/.bin/redocly", ["lint", "../openapi.json", `--format=${format}`], { encoding: "utf8" });

const out = lint("json");
let totals;
try {
  totals = JSON.parse(out.stdout).totals;
} catch {
  process.stderr.write(out.stdout + out.stderr);
  process.exit(1);
}
if (totals.errors === 0 && totals.warnings === 0) {
  console.log(`redocly lint openapi.json: 0 errors, 0 warnings (${totals.ignored} ignored)`);
  process.exit(0);
}
process.stdout.write(lint("stylish").stdout);
console.error(`redocly lint openapi.json: ${totals.errors} errors, ${totals.warnings} warnings; it must have none`);
process.exit(1);
