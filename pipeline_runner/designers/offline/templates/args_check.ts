// binloop offline tool: check (and where possible repair) a tool's arguments (ARGS).
import { clone, isNumber, isObject, kindOf, setAt, valuesAt, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { rules: [] }; // binloop:fill

type Rule = Record<string, any>;
type Issue = { rule: string; path: string; message: string };
type Change = { path: string; from: unknown; to: unknown };
type Found = Array<[Issue, Change | null]>;

export async function answer(params: Obj, _invoke?: InvokeTool, _signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params);
}

export function evaluate(config: Obj, params: Obj): Obj {
  const args = params["args"];
  if (!isObject(args)) {
    const problem = { rule: "input", path: "args", message: "args must be an object" };
    return { ok: false, repaired: false, args: {}, issues: [problem], changes: [] };
  }
  const rules = config["rules"] as Rule[];
  const [issues, fixed, changes] = check(rules, args, params);
  const remaining = changes.length ? check(rules, fixed, params)[0] : issues;
  return { ok: issues.length === 0, repaired: remaining.length === 0, args: fixed, issues, changes };
}

function check(rules: Rule[], args: Obj, params: Obj): [Issue[], Obj, Change[]] {
  const issues: Issue[] = [];
  const changes: Change[] = [];
  let fixed = clone(args);
  for (const rule of rules) {
    for (const [problem, change] of applyRule(rule, args, params)) {
      issues.push(problem);
      if (change !== null) {
        fixed = setAt(fixed, change.path, change.to);
        changes.push(change);
      }
    }
  }
  return [issues, fixed, changes];
}

function issue(rule: Rule, path: string, message: string): Issue {
  return { rule: rule["kind"], path, message };
}

function applyRule(rule: Rule, args: Obj, params: Obj): Found {
  const kind = rule["kind"];
  if (kind === "sum_equals") return sumEquals(rule, args, params);
  if (kind === "required") {
    return hasPath(args, rule["path"]) ? [] : [[issue(rule, rule["path"], `${rule["path"]} is required`), null]];
  }
  const found: Found = [];
  for (const [path, value] of valuesAt(args, rule["path"])) {
    const problem = valueProblem(rule, value);
    if (problem !== null) found.push([issue(rule, path, problem), repair(rule, path, value, params)]);
  }
  return found;
}

function hasPath(args: Obj, path: string): boolean {
  let node: unknown = args;
  for (const part of path.split(".")) {
    if (!isObject(node) || !(part in node)) return false;
    node = node[part];
  }
  return true;
}

function sumEquals(rule: Rule, args: Obj, params: Obj): Found {
  const items = args[rule["list"]];
  const field: string = rule["field"];
  const expected = params[rule["param"]];
  const where = `${rule["list"]}[].${field}`;
  if (!Array.isArray(items) || !items.every(isObject)) {
    return [[issue(rule, rule["list"], `${rule["list"]} must be a list of objects`), null]];
  }
  const amounts = items.map((item) => (item as Obj)[field]);
  if (!amounts.every(isNumber)) return [[issue(rule, where, `every ${where} must be a number`), null]];
  if (!isNumber(expected)) return [[issue(rule, where, `give ${rule["param"]} to check that ${where} adds up`), null]];
  const numbers = amounts as number[];
  const total = numbers.reduce((a, b) => a + b, 0);
  if (Math.abs(total - expected) <= 1e-6) return [];
  const problem = issue(rule, where, `${where} adds up to ${total}, expected ${expected}: ${rule["message"]}`);
  if (numbers.length === 0) return [[problem, null]];
  const last = numbers.length - 1;
  const newAmount = numbers[last]! + (expected - total);
  if (newAmount < 0) return [[problem, null]];
  return [[problem, { path: `${rule["list"]}[${last}].${field}`, from: numbers[last], to: newAmount }]];
}

function valueProblem(rule: Rule, value: unknown): string | null {
  const kind = rule["kind"];
  if (kind === "forbidden_kind" && typeof value === "string" && kindOf(value) === rule["value_kind"]) {
    return `${rule["value_kind"]} values are not accepted here: ${rule["message"]}`;
  }
  if (kind === "forbidden_value" && value === rule["value"]) return `${String(value)} is not accepted here: ${rule["message"]}`;
  if (kind === "type" && !hasType(value, rule["type"])) return `must be ${rule["type"]}`;
  if (kind === "enum" && !(rule["values"] as unknown[]).includes(value)) {
    return `must be one of ${(rule["values"] as unknown[]).map(String).join(", ")}`;
  }
  return null;
}

function hasType(value: unknown, name: string): boolean {
  switch (name) {
    case "integer": return isNumber(value) && Number.isInteger(value);
    case "number": return isNumber(value);
    case "string": return typeof value === "string";
    case "boolean": return typeof value === "boolean";
    case "object": return isObject(value);
    case "array": return Array.isArray(value);
    default: return true;
  }
}

function repair(rule: Rule, path: string, value: unknown, params: Obj): Change | null {
  const kind = rule["kind"];
  let fixed: unknown = null;
  if (kind === "type") fixed = coerce(value, rule["type"]);
  else if (kind === "enum" && typeof value === "string") {
    fixed = (rule["values"] as unknown[]).find((v) => typeof v === "string" && v.toLowerCase() === value.toLowerCase()) ?? null;
  } else if (kind === "forbidden_kind" || kind === "forbidden_value") {
    const alternatives = params["alternatives"];
    if (Array.isArray(alternatives)) {
      fixed = alternatives.find((a) => typeof a === "string" && a !== value && valueProblem(rule, a) === null) ?? null;
    }
  }
  return fixed === null ? null : { path, from: value, to: fixed };
}

function coerce(value: unknown, name: string): unknown {
  if (typeof value === "string" && (name === "integer" || name === "number")) {
    const text = value.trim();
    const number = text === "" ? NaN : Number(text);
    if (!Number.isFinite(number)) return null;
    if (name === "integer" && !Number.isInteger(number)) return null;
    return number;
  }
  if (typeof value === "string" && name === "boolean" && ["true", "false"].includes(value.trim().toLowerCase())) {
    return value.trim().toLowerCase() === "true";
  }
  if (isNumber(value) && name === "string") return String(value);
  return null;
}

void ANSWERS; void OUTPUT_SCHEMA;
