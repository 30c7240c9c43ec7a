// Serves one gated binloop plugin (a Hanzo bot plugin module) to an agent over stdio, so
// that an agent written in another language can run it (written by binloop, not by a
// designer). Usage: node serve_plugin.mjs /path/to/index.ts
//
// The plugin is hosted by plugin_host.mjs, exactly as in its acceptance tests. The
// protocol is one JSON object per line:
//   host -> agent   {"type": "ready", "name", "label", "description", "parameters"}
//   agent -> host   {"type": "execute", "id", "params"}
//   host -> agent   {"type": "result", "id", "details", "text"} | {"type": "error", "id", "message"}
//   host -> agent   {"type": "invoke", "id", "tool", "params"}   (the plugin's tool calls another)
//   agent -> host   {"type": "invoke_result", "id", "result"} | {"type": "invoke_error", "id", "message"}
//   agent -> host   {"type": "reset", "invoke": bool} -> host -> agent {"type": "reset_done"}
//                   (register afresh, with the host's invoke or without)
// It runs inside binloop's sandbox (pipeline_runner.sandbox): nothing it prints is a
// verdict; the parent judges every reply.
// stdout carries only protocol lines (console output of the plugin goes to stderr). The
// host ends when stdin closes (after the calls in flight).
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { registerPlugin } from "./plugin_host.mjs";

console.log = (...args) => console.error(...args);
console.info = console.log;
const send = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);
const logger = {
  info: (m) => console.error(`[plugin] ${m}`), warn: (m) => console.error(`[plugin] ${m}`),
  error: (m) => console.error(`[plugin] ${m}`), debug() {},
};

const invocations = new Map();
let lastInvocation = 0;
function invoke(tool, params) {
  lastInvocation += 1;
  const id = lastInvocation;
  return new Promise((resolve, reject) => {
    invocations.set(id, { resolve, reject });
    send({ type: "invoke", id, tool, params });
  });
}

let running = 0;
let closing = false;

async function execute(tool, message) {
  running += 1;
  try {
    const result = await tool.execute(`call-${message.id}`, message.params ?? {},
      new AbortController().signal);
    const text = Array.isArray(result?.content) && result.content[0]?.type === "text"
      ? result.content[0].text : "";
    send({ type: "result", id: message.id, details: result?.details ?? null, text });
  } catch (error) {
    send({ type: "error", id: message.id, message: String(error?.message ?? error) });
  } finally {
    running -= 1;
    if (closing && running === 0) process.exit(0);
  }
}

function settle(message) {
  const waiting = invocations.get(message.id);
  if (!waiting) return;
  invocations.delete(message.id);
  if (message.type === "invoke_result") waiting.resolve(message.result);
  else waiting.reject(new Error(String(message.message ?? "invoke failed")));
}

const entry = process.argv[2];
if (!entry) {
  console.error("usage: node serve_plugin.mjs /path/to/index.ts");
  process.exit(2);
}
const module = await import(pathToFileURL(entry).href);
let tool = registerPlugin(module, invoke, logger);
send({ type: "ready", name: tool.name, label: tool.label, description: tool.description,
  parameters: tool.parameters });

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    send({ type: "error", id: null, message: "not a JSON line" });
    return;
  }
  if (message.type === "execute") void execute(tool, message);
  else if (message.type === "reset") {
    tool = registerPlugin(module, message.invoke === false ? undefined : invoke, logger);
    send({ type: "reset_done" });
  }
  else if (message.type === "invoke_result" || message.type === "invoke_error") settle(message);
  else send({ type: "error", id: message.id ?? null, message: `unknown type ${message.type}` });
});
lines.on("close", () => {
  closing = true;
  if (running === 0) process.exit(0);
});
