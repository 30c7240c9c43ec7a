// binloop offline tool: check the resources a call needs against their state (CONFLICT).
import { clone, compareText, isNumber, isObject, kindOf, setAt, valuesAt, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { paths: [], message: "" }; // binloop:fill

export async function answer(params: Obj, _invoke?: InvokeTool, _signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params);
}

function available(entry: unknown, need: number): boolean {
  if (typeof entry === "boolean") return entry;
  if (isNumber(entry)) return entry >= need;
  if (isObject(entry)) {
    const remaining = entry["remaining"];
    const enough = !isNumber(remaining) || remaining >= need;
    return entry["available"] !== false && enough;
  }
  return true;
}

export function evaluate(config: Obj, params: Obj): Obj {
  const args = params["args"];
  const state = params["state"];
  const need = "need" in params ? params["need"] : 1;
  if (!isObject(args) || !isObject(state) || !isNumber(need)) {
    const message = "give args (an object), state (resource id -> true/false, a remaining amount, or {available, remaining}) and optionally need (a number)";
    return { ok: false, repaired: false, args: isObject(args) ? args : {}, issues: [{ rule: "input", path: "state", message }], changes: [], unchecked: [] };
  }
  const paths = config["paths"] as string[];
  let fixed = clone(args);
  const issues: Obj[] = [];
  const changes: Obj[] = [];
  const unchecked: string[] = [];
  let unresolved = 0;
  const used = new Set<string>();
  for (const generic of paths) for (const [, v] of valuesAt(args, generic)) if (typeof v === "string") used.add(v);
  for (const generic of paths) {
    for (const [path, value] of valuesAt(args, generic)) {
      if (typeof value !== "string") continue;
      if (!(value in state)) {
        unchecked.push(path);
        continue;
      }
      if (available(state[value], need)) continue;
      issues.push({ rule: "conflict", path, value, message: `${value} is not available: ${String(config["message"])}` });
      const alternative = pickAlternative(value, state, need, used);
      if (alternative === null) {
        unresolved += 1;
        continue;
      }
      used.add(alternative);
      fixed = setAt(fixed, path, alternative);
      changes.push({ path, from: value, to: alternative });
    }
  }
  return { ok: issues.length === 0, repaired: unresolved === 0, args: fixed, issues, changes, unchecked };
}

function pickAlternative(value: string, state: Obj, need: number, used: Set<string>): string | null {
  const kind = kindOf(value);
  for (const key of Object.keys(state).sort(compareText)) {
    if (!used.has(key) && kindOf(key) === kind && available(state[key], need)) return key;
  }
  return null;
}

void ANSWERS; void OUTPUT_SCHEMA;
