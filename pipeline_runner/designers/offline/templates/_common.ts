// Helpers inlined into every generated TypeScript plugin of the offline designer
// (the same semantics as _common.py).

// binloop:body
type Obj = Record<string, unknown>;
// How binloop's tool host lets a tool call another tool (see binloopHost in _plugin.ts).
type InvokeTool = (tool: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>;
type Leaf = [generic: string, concrete: string, value: unknown];

function isObject(value: unknown): value is Obj {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function isNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

function clone<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

function leaves(value: unknown, generic = "", concrete = ""): Leaf[] {
  const out: Leaf[] = [];
  if (isObject(value)) {
    for (const [key, item] of Object.entries(value)) {
      out.push(...leaves(item, generic ? `${generic}.${key}` : key, concrete ? `${concrete}.${key}` : key));
    }
  } else if (Array.isArray(value)) {
    value.forEach((item, index) => out.push(...leaves(item, `${generic}[]`, `${concrete}[${index}]`)));
  } else {
    out.push([generic, concrete, value]);
  }
  return out;
}

function valuesAt(args: unknown, genericPath: string): Array<[string, unknown]> {
  return leaves(args).filter(([g]) => g === genericPath).map(([, c, v]) => [c, v]);
}

function setAt(args: Obj, concretePath: string, value: unknown): Obj {
  const result = clone(args);
  const tokens = concretePath.match(/[^.[\]]+|\[\d+\]/g) ?? [];
  let node: unknown = result;
  const step = (container: unknown, token: string): unknown =>
    token.startsWith("[") ? (container as unknown[])[Number(token.slice(1, -1))] : (container as Obj)[token];
  for (const token of tokens.slice(0, -1)) node = step(node, token);
  const last = tokens[tokens.length - 1] ?? "";
  if (last.startsWith("[")) (node as unknown[])[Number(last.slice(1, -1))] = value;
  else (node as Obj)[last] = value;
  return result;
}

function kindOf(text: string): string {
  const match = /^(.*?)[_-]?(\d+)$/.exec(text);
  return match && match[1] ? match[1].toLowerCase() : "";
}

function normalize(message: string): string {
  let text = message.toLowerCase().replace(/^\s*error:\s*/, "");
  text = text.replace(/'[^']*'|"[^"]*"/g, "?");
  text = text.replace(/\d+(?:\.\d+)?/g, "#");
  return text.replace(/\s+/g, " ").trim();
}

function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current.push(Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    previous = current;
  }
  return previous[b.length]!;
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function errorText(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 1000);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

function sameJson(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => sameJson(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && sameJson(a[k], b[k]));
  }
  return a === b;
}

// binloop:end
export type { InvokeTool, Obj };
export { clone, compareText, distance, errorText, isNumber, isObject, kindOf, leaves, normalize, sameJson, setAt, sleep, valuesAt };
