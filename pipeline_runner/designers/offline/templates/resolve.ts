// binloop offline tool: resolve identifiers that do not exist to ones that do (NOTFOUND).
import { clone, compareText, distance, isObject, kindOf, setAt, valuesAt, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { paths: [], noun: "identifier" }; // binloop:fill

export async function answer(params: Obj, _invoke?: InvokeTool, _signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params);
}

export function evaluate(config: Obj, params: Obj): Obj {
  const args = params["args"];
  const known = params["known"];
  if (!isObject(args) || !Array.isArray(known) || !known.every((k) => typeof k === "string")) {
    const message = `give args (an object) and known (the ${String(config["noun"])} identifiers that exist, e.g. from a lookup tool)`;
    return { ok: false, repaired: false, args: isObject(args) ? args : {}, issues: [{ rule: "input", path: "known", message }], changes: [], unresolved: [] };
  }
  const knownList = known as string[];
  const knownSet = new Set(knownList);
  let fixed = clone(args);
  const issues: Obj[] = [];
  const changes: Obj[] = [];
  const unresolved: Obj[] = [];
  for (const generic of config["paths"] as string[]) {
    for (const [path, value] of valuesAt(args, generic)) {
      if (typeof value !== "string" || knownSet.has(value)) continue;
      issues.push({ rule: "not_found", path, message: `${String(config["noun"])} ${value} does not exist` });
      const [target, how] = resolve(value, knownList);
      if (target === null) {
        unresolved.push({ path, value, suggestions: nearest(value, knownList, 3) });
      } else {
        fixed = setAt(fixed, path, target);
        changes.push({ path, from: value, to: target, how });
      }
    }
  }
  return { ok: issues.length === 0, repaired: unresolved.length === 0, args: fixed, issues, changes, unresolved };
}

function ranked(value: string, pool: string[]): Array<[number, string]> {
  return pool.map((k): [number, string] => [distance(value, k), k]).sort((a, b) => a[0] - b[0] || compareText(a[1], b[1]));
}

function resolve(value: string, known: string[]): [string | null, string] {
  const sameCase = known.filter((k) => k.toLowerCase() === value.toLowerCase());
  if (sameCase.length === 1) return [sameCase[0]!, "case"];
  const kind = kindOf(value);
  const sameKind = known.filter((k) => kind !== "" && kindOf(k) === kind);
  if (sameKind.length === 1) return [sameKind[0]!, "only one of its kind"];
  let pool = sameKind;
  let how = "closest of its kind";
  let limit = value.length;
  if (sameKind.length === 0) {
    pool = known;
    how = "closest";
    limit = Math.max(2, Math.floor(value.length / 4));
  }
  const order = ranked(value, pool);
  const first = order[0];
  if (first && first[0] <= limit && (order.length === 1 || order[1]![0] > first[0])) return [first[1], how];
  return [null, ""];
}

function nearest(value: string, known: string[], count: number): string[] {
  return ranked(value, known).slice(0, count).map(([, k]) => k);
}

void ANSWERS; void OUTPUT_SCHEMA;
