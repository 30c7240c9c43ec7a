// Test harness: load plugins through the `openclaw` npm package's own loader (the SDK the
// Hanzo bot forks; its loader lives in a hashed dist chunk, found by the function's name),
// bundled plugins off, then execute each tool of the registry. Prints one JSON object.
// Usage: node openclaw_loader_check.mjs OPENCLAW_DIST CALLS.json LOAD_PATH...
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dist, callsFile, ...loadPaths] = process.argv.slice(2);
process.env.OPENCLAW_DISABLE_BUNDLED_PLUGINS = "1";
const calls = JSON.parse(readFileSync(callsFile, "utf8"));
const file = readdirSync(dist).find((f) => f.startsWith("loader-runtime-load-") &&
  readFileSync(join(dist, f), "utf8").includes("function loadOpenClawPlugins("));
const alias = /loadOpenClawPlugins as (\w+)/.exec(readFileSync(join(dist, file), "utf8"))[1];
const loadOpenClawPlugins = (await import(pathToFileURL(join(dist, file)).href))[alias];
const registry = await loadOpenClawPlugins({ config: { plugins: { load: { paths: loadPaths } } }, cache: false });
const results = {};
for (const entry of registry.tools ?? []) {
  for (const tool of [].concat(entry.factory({ sessionId: "openclaw-check" }) ?? [])) {
    if (calls[tool.name] === undefined) continue;
    try {
      results[tool.name] = { ok: true, result: await tool.execute("check-1", calls[tool.name]) };
    } catch (error) {
      results[tool.name] = { ok: false, error: String(error?.message ?? error) };
    }
  }
}
console.log(JSON.stringify({
  pid: process.pid,
  plugins: registry.plugins.map((p) => ({ id: p.id, status: p.status, error: p.error ?? null, source: p.source })),
  diagnostics: registry.diagnostics, results,
}));
process.exit(0);
