// binloop demo's agent inside a real Hanzo bot plugin runtime (written by binloop; run by
// `binloop demo --agent hanzo` and the tests): node hanzo_agent.mjs SETTINGS.json
//
// The bot's own code does the plugin work: src/plugins/loader.ts loads the plugins of
// the load paths (binloop's bridge and the demo airline; bundled plugins off), its global
// hook runner runs their hooks, src/plugins/tools.ts resolves the tools of each agent run
// (calling the bridge's tool factory), src/agents/pi-tools.before-tool-call.ts and
// pi-tool-definition-adapter.ts wrap them (before_tool_call), and
// pi-embedded-subscribe.handlers.tools.ts ends each call (after_tool_call). Only the
// agent's decisions are scripted here (there is no model): the same job as binloop's
// reference agent, a naive payment planner that forgets bag fees and insurance.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const settings = JSON.parse(readFileSync(process.argv[2], "utf8"));
const bot = settings.botRoot;
process.env.OPENCLAW_BUNDLED_PLUGINS_DIR = settings.bundledDir;
const log = (...args) => console.log(new Date().toISOString().slice(11, 23), "agent:", ...args);

const { createJiti } = createRequire(join(bot, "package.json"))("jiti");
const jiti = createJiti(join(bot, "src", "index.ts"), { interopDefault: true });
const started = Date.now();
const { loadBotPlugins } = await jiti.import(join(bot, "src/plugins/loader.ts"));
const { resolvePluginTools } = await jiti.import(join(bot, "src/plugins/tools.ts"));
const { wrapToolWithBeforeToolCallHook } = await jiti.import(join(bot, "src/agents/pi-tools.before-tool-call.ts"));
const { toToolDefinitions } = await jiti.import(join(bot, "src/agents/pi-tool-definition-adapter.ts"));
const { handleToolExecutionStart, handleToolExecutionEnd } = await jiti.import(join(bot, "src/agents/pi-embedded-subscribe.handlers.tools.ts"));
log(`bot runtime loaded in ${Date.now() - started} ms (${bot})`);

const config = {
  plugins: {
    load: { paths: settings.loadPaths },
    allow: settings.allow,
    entries: Object.fromEntries(Object.entries(settings.entries).map(([id, c]) => [id, { enabled: true, config: c }])),
  },
};
const registry = loadBotPlugins({ config });
for (const p of registry.plugins) log(`plugin ${p.id}: ${p.status}${p.error ? ` (${p.error})` : ""}`);
if (registry.plugins.some((p) => p.status !== "loaded")) {
  console.error(JSON.stringify(registry.diagnostics));
  process.exit(4);
}

const session = settings.session;
const agentId = "main";
const sessionKey = `agent:${agentId}:${session}`;
let runs = 0;
let calls = 0;
const report = { ok: false, calls: 0, failures: 0, blocked: 0, runs: 0, done: [], pending: [], used: [], tools_seen: [] };

function newRun() {
  runs += 1;
  const runId = `${session}-run-${runs}`;
  const tools = resolvePluginTools({ context: { config, agentId, sessionKey, sessionId: session } });
  const wrapped = tools.map((tool) => wrapToolWithBeforeToolCallHook(tool, { agentId, sessionKey, sessionId: session, runId }));
  const defs = new Map(toToolDefinitions(wrapped).map((d) => [d.name, d]));
  for (const name of defs.keys()) if (!report.tools_seen.includes(name)) {
    report.tools_seen.push(name);
    if (report.tools_seen.length > 3) log(`run ${runs}: new tool visible: ${name}`);
  }
  const handlerCtx = {
    params: { runId, session: { messages: [] }, agentId, sessionKey, sessionId: session },
    state: { toolMetaById: new Map(), toolMetas: [], toolSummaryById: new Set(), lastToolError: undefined,
      pendingMessagingTexts: new Map(), pendingMessagingTargets: new Map(), pendingMessagingMediaUrls: new Map(),
      messagingToolSentTexts: [], messagingToolSentTextsNormalized: [], messagingToolSentMediaUrls: [],
      messagingToolSentTargets: [], blockBuffer: "", successfulCronAdds: 0 },
    log: { debug() {}, warn: (m) => log(`warn: ${m}`) },
    flushBlockReplyBuffer() {}, shouldEmitToolResult: () => false, shouldEmitToolOutput: () => false,
    emitToolSummary() {}, emitToolOutput() {}, trimMessagingToolSent() {},
  };
  return { runId, defs, handlerCtx };
}

// One tool call the way the bot's agent loop makes it: start handler, the adapted
// execute (before_tool_call inside), end handler (after_tool_call).
async function call(run, name, args) {
  const def = run.defs.get(name);
  if (!def) return { ok: false, error: `no tool ${name}` };
  for (;;) {
    calls += 1;
    const toolCallId = `call-${calls}`;
    await handleToolExecutionStart(run.handlerCtx, { type: "tool_execution_start", toolName: name, toolCallId, args });
    const result = await def.execute(toolCallId, args, undefined, undefined);
    const isError = result?.details?.status === "error";
    await handleToolExecutionEnd(run.handlerCtx, { type: "tool_execution_end", toolName: name, toolCallId, isError, result });
    if (!isError) return { ok: true, details: result.details };
    const error = String(result.details.error ?? "");
    if (error.includes("binloop: paused")) {
      report.blocked += 1;
      if (report.blocked === 1 || report.blocked % 20 === 0) log(`${name} held: ${error.slice(0, 90)}...`);
      await new Promise((resolve) => setTimeout(resolve, 250));
      continue;
    }
    report.failures += 1;
    log(`${name} failed: ${error}`);
    return { ok: false, error };
  }
}

const BOOKINGS = settings.bookings;
function reservationArgs(b, flight) {
  const passengers = b.passengers.map(([first_name, last_name, dob]) => ({ first_name, last_name, dob }));
  const fares = flight.prices[b.cabin] * passengers.length;
  const onCertificate = Math.min(b.certificate_balance, fares);
  const payments = [{ payment_id: b.certificate, amount: onCertificate }];
  if (fares > onCertificate) payments.push({ payment_id: b.card, amount: fares - onCertificate });
  return { user_id: b.user_id, origin: b.origin, destination: b.destination, flight_type: "one_way", cabin: b.cabin,
    flights: [{ flight_number: flight.flight_number, date: b.date }], passengers, payment_methods: payments,
    total_baggages: b.nonfree_baggages, nonfree_baggages: b.nonfree_baggages, insurance: b.insurance ? "yes" : "no" };
}

function checkTool(run) {
  return [...run.defs.keys()].find((n) => n.startsWith("book_reservation_") && n.endsWith("_check"));
}

async function bookWith(run, item) {
  const checker = checkTool(run);
  let args = item.args;
  if (checker) {
    const schema = run.defs.get(checker).parameters ?? {};
    const params = { args, ...("expected_total" in (schema.properties ?? {}) ? { expected_total: item.quote } : {}) };
    const checked = await call(run, checker, params);
    if (checked.ok && checked.details?.repaired && checked.details.args) {
      args = checked.details.args;
      report.used.push({ tool: checker, booking: item.index, changes: checked.details.changes });
      log(`${checker} repaired booking ${item.index}: ${JSON.stringify(checked.details.changes)}`);
    }
  }
  const booked = await call(run, "book_reservation", args);
  if (booked.ok) report.done.push({ booking: item.index, retried: Boolean(item.retried), reservation_id: booked.details.reservation_id, total: booked.details.total });
  return booked;
}

let pending = [];
for (let index = 0; index < BOOKINGS.length; index += 1) {
  const b = BOOKINGS[index];
  const run = newRun();
  const found = await call(run, "search_direct_flight", { origin: b.origin, destination: b.destination, date: b.date });
  if (!found.ok) { pending.push({ index, stage: "search", error: found.error }); continue; }
  const flight = found.details.reduce((best, f) => (f.prices[b.cabin] < best.prices[b.cabin] ? f : best));
  const args = reservationArgs(b, flight);
  const quote = await call(run, "get_quote", args);
  if (!quote.ok) { pending.push({ index, stage: "quote", error: quote.error }); continue; }
  const item = { index, args, quote: quote.details.total };
  const booked = await bookWith(run, item);
  if (!booked.ok) pending.push({ ...item, error: booked.error });
}

// What failed waits for a tool that answers it: each new agent run resolves the tools
// again, and the bridge's factory then offers whatever the library has gated since.
const deadline = Date.now() + settings.waitForToolsMs;
while (pending.length && Date.now() < deadline) {
  const run = newRun();
  if (!checkTool(run)) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    continue;
  }
  const left = [];
  for (const item of pending) {
    if (!item.args) { left.push(item); continue; }
    const booked = await bookWith(run, { ...item, retried: true });
    if (!booked.ok) left.push({ ...item, error: booked.error });
  }
  pending = left;
  if (pending.length) await new Promise((resolve) => setTimeout(resolve, 500));
}

report.ok = pending.length === 0;
report.calls = calls;
report.runs = runs;
report.pending = pending;
for (const entry of registry.services) await entry.service.stop?.({ config, stateDir: settings.stateDir, logger: console });
writeFileSync(settings.report, JSON.stringify(report, null, 2));
log(`${report.ok ? "done" : "gave up"}: ${report.done.length} of ${BOOKINGS.length} booked (${report.done.filter((d) => d.retried).length} with the new tool), ${calls} calls, ${report.failures} failed, ${report.blocked} held by a pause`);
process.exit(report.ok ? 0 : 3);
