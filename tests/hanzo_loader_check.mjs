// Test harness: load plugins through the Hanzo bot's real loader (src/plugins/loader.ts,
// from the bot's source, via jiti as the bot does), bundled plugins off, then resolve and
// execute each tool as the bot's tool resolution does. Prints one JSON object.
// Usage: node hanzo_loader_check.mjs BOT_ROOT BUNDLED_DIR CALLS.json LOAD_PATH...
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [bot, bundled, callsFile, ...loadPaths] = process.argv.slice(2);
process.env.OPENCLAW_BUNDLED_PLUGINS_DIR = bundled;
const calls = JSON.parse(readFileSync(callsFile, "utf8"));
const { createJiti } = createRequire(join(bot, "package.json"))("jiti");
const jiti = createJiti(join(bot, "src", "index.ts"), { interopDefault: true });
const { loadBotPlugins } = await jiti.import(join(bot, "src/plugins/loader.ts"));
const { resolvePluginTools } = await jiti.import(join(bot, "src/plugins/tools.ts"));
const config = { plugins: { load: { paths: loadPaths } } };
const registry = loadBotPlugins({ config, cache: true });
const tools = resolvePluginTools({ context: { config, sessionId: "loader-check" } });
const results = {};
for (const tool of tools) {
  const params = calls[tool.name];
  if (params === undefined) continue;
  try {
    results[tool.name] = { ok: true, result: await tool.execute("check-1", params, undefined, undefined) };
  } catch (error) {
    results[tool.name] = { ok: false, error: String(error?.message ?? error) };
  }
}
console.log(JSON.stringify({
  pid: process.pid,
  plugins: registry.plugins.map((p) => ({ id: p.id, status: p.status, error: p.error ?? null, source: p.source, origin: p.origin, toolNames: p.toolNames })),
  diagnostics: registry.diagnostics,
  tools: tools.map((t) => t.name),
  results,
}));
process.exit(0);
