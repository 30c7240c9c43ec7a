// One call of a gated binloop plugin, run by binloop's tool host inside the sandbox
// (written by binloop, not by a designer): reads binloop-call.json, registers the plugin
// with plugin_host.mjs, runs its tool's execute, prints one JSON line
// {"ok", "result": {"content", "details"}} or {"ok": false, "error"}.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { registerPlugin } from "./plugin_host.mjs";

const write = process.stdout.write.bind(process.stdout);
console.log = (...args) => console.error(...args);
console.info = console.log;
let reply;
try {
  const call = JSON.parse(readFileSync("binloop-call.json", "utf8"));
  const module = await import(pathToFileURL(`${process.cwd()}/${call.entry}`).href);
  const tool = registerPlugin(module, undefined);
  const result = await tool.execute("binloop-host", call.params ?? {}, new AbortController().signal);
  reply = { ok: true, result: { content: result?.content ?? [], details: result?.details ?? null } };
} catch (error) {
  reply = { ok: false, error: String(error?.message ?? error) };
}
write(`${JSON.stringify(reply)}\n`);
