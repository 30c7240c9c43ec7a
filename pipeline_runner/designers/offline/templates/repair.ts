// binloop offline tool: repair malformed text arguments (JSON, expressions, text) (SYNTAX).
import { clone, isObject, setAt, valuesAt, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { fields: [] }; // binloop:fill

const EXPRESSION = /^[0-9+\-*/().%\s]+$/;
const CLOSERS: Record<string, string> = { "{": "}", "[": "]" };
// eslint-disable-next-line no-control-regex
const CONTROL = /[\x00-\x08\x0b\x0c\x0e-\x1f]/g;

export async function answer(params: Obj, _invoke?: InvokeTool, _signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params);
}

export function evaluate(config: Obj, params: Obj): Obj {
  const args = params["args"];
  if (!isObject(args)) {
    return { ok: false, repaired: false, args: {}, issues: [{ rule: "input", path: "args", message: "args must be an object" }], changes: [] };
  }
  let fixed = clone(args);
  const issues: Obj[] = [];
  const changes: Obj[] = [];
  let unresolved = 0;
  for (const field of config["fields"] as Array<{ path: string; kind: string }>) {
    for (const [path, value] of valuesAt(args, field.path)) {
      if (typeof value !== "string" || isValid(field.kind, value)) continue;
      issues.push({ rule: "syntax", path, message: `${path} is not valid ${field.kind}` });
      const repaired = repairText(field.kind, value);
      if (repaired !== value) {
        fixed = setAt(fixed, path, repaired);
        changes.push({ path, from: value, to: repaired });
      }
      if (!isValid(field.kind, repaired)) unresolved += 1;
    }
  }
  return { ok: issues.length === 0, repaired: unresolved === 0, args: fixed, issues, changes };
}

function isValid(kind: string, text: string): boolean {
  if (kind === "json") {
    try {
      JSON.parse(text);
      return true;
    } catch {
      return false;
    }
  }
  if (kind === "expression") {
    return EXPRESSION.test(text) && balanced(text) && !/[+\-*/%.]\s*$/.test(text) && text.trim() !== "";
  }
  return !new RegExp(CONTROL.source).test(text);
}

function balanced(text: string): boolean {
  let depth = 0;
  for (const char of text) {
    depth += char === "(" ? 1 : char === ")" ? -1 : 0;
    if (depth < 0) return false;
  }
  return depth === 0;
}

function repairText(kind: string, text: string): string {
  if (kind === "json") return repairJson(text);
  if (kind === "expression") return repairExpression(text);
  return text.replace(CONTROL, "").trim();
}

function repairJson(input: string): string {
  let text = input.trim().replace(/^```[A-Za-z]*\s*|\s*```$/g, "");
  text = text.replace(/\u201c/g, '"').replace(/\u201d/g, '"').replace(/\u2018/g, "'").replace(/\u2019/g, "'");
  if (!text.includes('"')) text = text.replace(/'/g, '"');
  text = text.replace(/\bTrue\b/g, "true").replace(/\bFalse\b/g, "false").replace(/\bNone\b/g, "null");
  text = text.replace(/([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:/g, '$1"$2":');
  text = text.replace(/,\s*([}\]])/g, "$1");
  return closeBrackets(text);
}

function closeBrackets(text: string): string {
  const stack: string[] = [];
  let inString = false;
  let escaped = false;
  for (const char of text) {
    if (inString) {
      if (escaped) escaped = false;
      else if (char === "\\") escaped = true;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char in CLOSERS) stack.push(CLOSERS[char]!);
    else if (stack.length && char === stack[stack.length - 1]) stack.pop();
  }
  return text + (inString ? '"' : "") + stack.reverse().join("");
}

function repairExpression(input: string): string {
  let text = input.replace(/\u00d7/g, "*").replace(/\u00f7/g, "/").replace(/\u2212/g, "-");
  text = text.trim().replace(/[+\-*/%.\s]+$/, "");
  let out = "";
  let depth = 0;
  for (const char of text) {
    if (char === ")" && depth === 0) continue;
    depth += char === "(" ? 1 : char === ")" ? -1 : 0;
    out += char;
  }
  return out + ")".repeat(depth);
}

void ANSWERS; void OUTPUT_SCHEMA;
