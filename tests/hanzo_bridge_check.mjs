// Test harness: binloop's bridge in the Hanzo bot's real plugin runtime (its loader, its
// global hook runner, its before_tool_call wrapper and tool-definition adapter, its tool
// execution handlers that fire after_tool_call), driven step by step from the test over
// stdin/stdout (JSON lines): {"op": "calls", "tool", "n", "args"} makes n calls,
// {"op": "counters"} reports the bridge's counters, {"op": "exit"} stops its service.
// Usage: node hanzo_bridge_check.mjs SETTINGS.json
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { join } from "node:path";

const settings = JSON.parse(readFileSync(process.argv[2], "utf8"));
const bot = settings.botRoot;
process.env.OPENCLAW_BUNDLED_PLUGINS_DIR = settings.bundledDir;
const { createJiti } = createRequire(join(bot, "package.json"))("jiti");
const jiti = createJiti(join(bot, "src", "index.ts"), { interopDefault: true });
const { loadBotPlugins } = await jiti.import(join(bot, "src/plugins/loader.ts"));
const { resolvePluginTools } = await jiti.import(join(bot, "src/plugins/tools.ts"));
const { wrapToolWithBeforeToolCallHook } = await jiti.import(join(bot, "src/agents/pi-tools.before-tool-call.ts"));
const { toToolDefinitions } = await jiti.import(join(bot, "src/agents/pi-tool-definition-adapter.ts"));
const { handleToolExecutionStart, handleToolExecutionEnd } = await jiti.import(join(bot, "src/agents/pi-embedded-subscribe.handlers.tools.ts"));
const config = { plugins: { load: { paths: settings.loadPaths },
  entries: Object.fromEntries(Object.entries(settings.entries).map(([id, c]) => [id, { enabled: true, config: c }])) } };
const registry = loadBotPlugins({ config });
const send = (m) => process.stdout.write(`${JSON.stringify(m)}\n`);
const session = settings.session;
let calls = 0;

async function callTool(name, args) {
  const runId = `run-${calls}`;
  const ctx = { agentId: "main", sessionKey: `agent:main:${session}`, sessionId: session, runId };
  const tools = resolvePluginTools({ context: { config, ...ctx } });
  const defs = new Map(toToolDefinitions(tools.map((t) => wrapToolWithBeforeToolCallHook(t, ctx))).map((d) => [d.name, d]));
  const handlerCtx = { params: { runId, session: { messages: [] }, agentId: "main", sessionKey: ctx.sessionKey, sessionId: session },
    state: { toolMetaById: new Map(), toolMetas: [], toolSummaryById: new Set(), lastToolError: undefined, pendingMessagingTexts: new Map(),
      pendingMessagingTargets: new Map(), pendingMessagingMediaUrls: new Map(), messagingToolSentTexts: [], messagingToolSentTextsNormalized: [],
      messagingToolSentMediaUrls: [], messagingToolSentTargets: [], blockBuffer: "", successfulCronAdds: 0 },
    log: { debug() {}, warn() {} }, flushBlockReplyBuffer() {}, shouldEmitToolResult: () => false, shouldEmitToolOutput: () => false,
    emitToolSummary() {}, emitToolOutput() {}, trimMessagingToolSent() {} };
  calls += 1;
  const toolCallId = `call-${calls}`;
  await handleToolExecutionStart(handlerCtx, { type: "tool_execution_start", toolName: name, toolCallId, args });
  const result = await defs.get(name).execute(toolCallId, args, undefined, undefined);
  const isError = result?.details?.status === "error";
  await handleToolExecutionEnd(handlerCtx, { type: "tool_execution_end", toolName: name, toolCallId, isError, result });
  return { isError, error: isError ? result.details.error : null };
}

function bridge() {
  const bridges = globalThis[Symbol.for("binloop.bridges")];
  return bridges ? [...bridges.values()][0] : null;
}

send({ op: "ready", plugins: registry.plugins.map((p) => ({ id: p.id, status: p.status, error: p.error ?? null })),
  hooks: registry.hooks?.length ?? null, typedHooks: registry.typedHooks?.map((h) => h.hookName) ?? null });
for await (const line of createInterface({ input: process.stdin })) {
  const msg = JSON.parse(line);
  if (msg.op === "calls") {
    const out = [];
    for (let i = 0; i < msg.n; i += 1) out.push(await callTool(msg.tool, msg.args));
    send({ op: "calls", results: out });
  } else if (msg.op === "counters") {
    const b = bridge();
    await b?.publisher.flush();
    send({ op: "counters", counters: b?.publisher.counters ?? null, connected: b?.publisher.connected ?? null });
  } else if (msg.op === "exit") {
    for (const entry of registry.services) await entry.service.stop?.({ config, stateDir: "/tmp", logger: console });
    send({ op: "exit" });
    process.exit(0);
  }
}
