// binloop offline tool: flag calls likely to be refused for lack of permission (PERM).
import { isObject, kindOf, valuesAt, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { tool: "", denied: [], message: "" }; // binloop:fill

type Rule = { path: string; prefix?: string | null; value?: string | null; kind?: string | null };

export async function answer(params: Obj, _invoke?: InvokeTool, _signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params);
}

function deniedBy(rule: Rule, value: string): boolean {
  if (rule.prefix && value.startsWith(rule.prefix)) return true;
  if (rule.value !== undefined && rule.value !== null && value === rule.value) return true;
  return Boolean(rule.kind) && kindOf(value) === rule.kind;
}

export function evaluate(config: Obj, params: Obj): Obj {
  const args = params["args"];
  const granted = "granted" in params ? params["granted"] : [];
  if (!isObject(args) || !Array.isArray(granted)) {
    const problem = { rule: "input", path: "args", message: "give args (an object) and optionally granted (a list of prefixes)" };
    return { ok: false, repaired: false, args: {}, issues: [problem], changes: [], advice: "fix the input" };
  }
  const grants = granted.filter((g): g is string => typeof g === "string" && g !== "");
  const tool = String(config["tool"]);
  const issues: Obj[] = [];
  for (const rule of config["denied"] as Rule[]) {
    for (const [path, value] of valuesAt(args, rule.path)) {
      if (typeof value !== "string" || !deniedBy(rule, value)) continue;
      if (grants.some((g) => value.startsWith(g))) continue;
      issues.push({ rule: "permission", path, value, message: `${tool} refused ${value} before: ${String(config["message"])}` });
    }
  }
  let advice = "no known permission problem";
  if (issues.length) advice = `${tool} is likely to refuse this call: ask for the permission first (then pass it in granted) or use another value`;
  return { ok: issues.length === 0, repaired: issues.length === 0, args, issues, changes: [], advice };
}

void ANSWERS; void OUTPUT_SCHEMA;
