// Acceptance tests of a generated binloop plugin (written by binloop, not by the designer).
// Each case of cases.json is run through the plugin's registered tool, hosted by
// plugin_host.mjs (register(api) must call api.registerTool once); execute(toolCallId,
// params, signal, onUpdate) must resolve to {content: [{type: "text", text}], details}; `details` is matched against the pattern
// (see pipeline_runner.design for the matching rules).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { registerPlugin } from "./plugin_host.mjs";

const CASES = JSON.parse(readFileSync(new URL("./cases.json", import.meta.url), "utf8"));
const module = await import("../index.ts");
const plugin = module.default;

function scriptedInvoke(script) {
  const calls = [];
  const invoke = async (tool, args, _signal) => {
    const index = calls.length;
    calls.push([tool, args]);
    if (index >= script.length) {
      throw new Error(`invoke called ${index + 1} times; the script has ${script.length} responses`);
    }
    const entry = script[index];
    if (entry.delay_ms) await new Promise((resolve) => setTimeout(resolve, entry.delay_ms));
    if ("error" in entry) throw new Error(entry.error);
    return entry.result;
  };
  return { invoke, calls };
}

function registerTool(invoke) {
  return registerPlugin(module, invoke);
}

function isType(value, name) {
  switch (name) {
    case "integer": return Number.isInteger(value);
    case "number": return typeof value === "number";
    case "string": return typeof value === "string";
    case "boolean": return typeof value === "boolean";
    case "object": return value !== null && typeof value === "object" && !Array.isArray(value);
    case "array": return Array.isArray(value);
    case "null": return value === null;
    default: return false;
  }
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function matches(expected, actual, where = "output") {
  if (isObject(expected) && Object.keys(expected).some((k) => k.startsWith("$"))) {
    return operatorMismatches(expected, actual, where);
  }
  if (isObject(expected)) {
    if (!isObject(actual)) return [`${where}: expected an object, got ${JSON.stringify(actual)}`];
    return Object.entries(expected).flatMap(([key, value]) =>
      key in actual ? matches(value, actual[key], `${where}.${key}`) : [`${where}.${key}: missing`]);
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) {
      return [`${where}: expected ${expected.length} items, got ${JSON.stringify(actual)}`];
    }
    return expected.flatMap((e, i) => matches(e, actual[i], `${where}[${i}]`));
  }
  let same;
  if (typeof expected === "number" && typeof actual === "number") {
    same = Math.abs(expected - actual) <= 1e-9 * Math.max(1, Math.abs(expected));
  } else {
    same = expected === actual;
  }
  return same ? [] : [`${where}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`];
}

function operatorMismatches(pattern, actual, where) {
  const out = [];
  for (const [op, arg] of Object.entries(pattern)) {
    let ok;
    if (op === "$contains") ok = typeof actual === "string" && actual.includes(String(arg));
    else if (op === "$type") ok = isType(actual, arg);
    else if (op === "$len") {
      ok = (Array.isArray(actual) || typeof actual === "string") ? actual.length === arg
        : isObject(actual) && Object.keys(actual).length === arg;
    } else if (op === "$some") ok = Array.isArray(actual) && actual.some((a) => matches(arg, a).length === 0);
    else if (op === "$gte") ok = typeof actual === "number" && actual >= arg;
    else if (op === "$lte") ok = typeof actual === "number" && actual <= arg;
    else ok = false;
    if (!ok) out.push(`${where}: ${op} ${JSON.stringify(arg)} does not hold for ${JSON.stringify(actual)}`);
  }
  return out;
}

function substitute(value, previous) {
  if (typeof value === "string" && value.startsWith("$prev.")) {
    assert.ok(previous, "a first step cannot refer to $prev");
    return previous[value.slice("$prev.".length)];
  }
  if (Array.isArray(value)) return value.map((v) => substitute(v, previous));
  if (isObject(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, previous)]));
  }
  return value;
}

test("declares the plugin contract", () => {
  for (const key of ["id", "name", "description"]) assert.equal(typeof plugin[key], "string", key);
  assert.equal(typeof plugin.configSchema, "object");
  assert.equal(typeof plugin.configSchema.safeParse, "function", "configSchema is a validator");
  assert.equal(typeof plugin.register, "function");
  const tool = registerTool(undefined);
  for (const key of ["name", "label", "description"]) assert.equal(typeof tool[key], "string", key);
  assert.equal(tool.parameters.type, "object");
  assert.equal(typeof tool.execute, "function");
});

for (const kase of CASES) {
  test(kase.name, async () => {
    const scripted = kase.invoke == null ? null : scriptedInvoke(kase.invoke);
    const tool = registerTool(scripted ? scripted.invoke : undefined);
    let previous = null;
    let number = 0;
    for (const step of kase.steps) {
      number += 1;
      if (step.sleep_ms) await new Promise((resolve) => setTimeout(resolve, step.sleep_ms));
      const params = substitute(step.params, previous);
      const result = await tool.execute(`call-${number}`, params, new AbortController().signal);
      assert.ok(Array.isArray(result.content) && result.content[0].type === "text",
        `step ${number}: result.content must start with a text part`);
      const details = result.details;
      assert.deepEqual(JSON.parse(result.content[0].text), details,
        `step ${number}: the text part must be the JSON of details`);
      const expected = { ...step.expect };
      const calls = expected.$calls;
      delete expected.$calls;
      const problems = matches(expected, details, `step ${number}`);
      if (calls !== undefined && (scripted ? scripted.calls.length : 0) !== calls) {
        problems.push(`step ${number}: expected ${calls} invoke calls, got ${scripted ? scripted.calls.length : 0}`);
      }
      assert.deepEqual(problems, []);
      previous = details;
    }
  });
}
