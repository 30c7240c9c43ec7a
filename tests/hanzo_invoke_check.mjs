// Test harness: wrapper tools in the Hanzo bot's real runtime. The bot's own loader
// (src/plugins/loader.ts, via jiti) loads the plugins of the bot's configuration file
// (OPENCLAW_CONFIG_PATH: load paths, gateway port and auth, tool policy), bundled plugins
// off; the bot's own POST /tools/invoke handler (src/gateway/tools-invoke-http.ts, the
// one its gateway mounts) serves on the configured loopback port, with the auth the bot
// resolves from that configuration; then each call of CALLS.json runs through the bot's
// tool resolution and the tool's execute, as an agent run would. Prints one JSON object:
// per call its outcome and seconds, and how often each original tool ran in this process.
// Usage: node hanzo_invoke_check.mjs BOT_ROOT BUNDLED_DIR CALLS.json
import { createRequire } from "node:module";
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [bot, bundled, callsFile] = process.argv.slice(2);
process.env.OPENCLAW_BUNDLED_PLUGINS_DIR = bundled;
const calls = JSON.parse(readFileSync(callsFile, "utf8"));
const { createJiti } = createRequire(join(bot, "package.json"))("jiti");
const jiti = createJiti(join(bot, "src", "index.ts"), { interopDefault: true });
const { loadConfig } = await jiti.import(join(bot, "src/config/config.ts"));
const { loadBotPlugins } = await jiti.import(join(bot, "src/plugins/loader.ts"));
const { resolvePluginTools } = await jiti.import(join(bot, "src/plugins/tools.ts"));
const { resolveGatewayAuth } = await jiti.import(join(bot, "src/gateway/auth.ts"));
const { handleToolsInvokeHttpRequest } = await jiti.import(join(bot, "src/gateway/tools-invoke-http.ts"));

const config = loadConfig();
const registry = loadBotPlugins({ config, cache: true });
const auth = resolveGatewayAuth({ authConfig: config.gateway?.auth, env: process.env });
const server = createServer((req, res) => {
  handleToolsInvokeHttpRequest(req, res, { auth }).then((handled) => {
    if (!handled) { res.statusCode = 404; res.end(); }
  }, (error) => { res.statusCode = 500; res.end(String(error)); });
});
await new Promise((resolve) => server.listen(config.gateway.port, "127.0.0.1", resolve));

const sessionKey = "agent:main:invoke-check";
const results = {};
for (const [label, { tool, params }] of Object.entries(calls)) {
  const tools = resolvePluginTools({ context: { config, agentId: "main", sessionKey, sessionId: "invoke-check" } });
  const found = tools.find((t) => t.name === tool);
  const started = Date.now();
  if (!found) {
    results[label] = { ok: false, error: `no tool ${tool}`, seconds: 0 };
    continue;
  }
  try {
    results[label] = { ok: true, result: await found.execute(`call-${label}`, params, undefined, undefined) };
  } catch (error) {
    results[label] = { ok: false, error: String(error?.message ?? error) };
  }
  results[label].seconds = (Date.now() - started) / 1000;
}
server.close();
console.log(JSON.stringify({
  pid: process.pid,
  plugins: registry.plugins.map((p) => ({ id: p.id, status: p.status, error: p.error ?? null })),
  results,
  originalCalls: globalThis[Symbol.for("binloop.test.calls")] ?? {},
}));
process.exit(0);
