// binloop's redaction rules (redact-rules.json, exported from binloop/core/redact.py),
// applied in the bot before a record leaves it: values under secret-looking keys, then
// every text rule over every string (args and error text).
import { readFileSync } from "node:fs";

type Rule = { pattern: string; flags: string; replacement?: string };
type Rules = { mask: string; secret_key: Rule; text: Rule[] };

const RULES = JSON.parse(readFileSync(new URL("../redact-rules.json", import.meta.url), "utf8")) as Rules;
const SECRET_KEY = new RegExp(RULES.secret_key.pattern, RULES.secret_key.flags);
const TEXT = RULES.text.map((r) => ({ re: new RegExp(r.pattern, r.flags), replacement: r.replacement ?? RULES.mask }));
export const MASK = RULES.mask;

export function redactText(text: string): string {
  let out = text;
  for (const rule of TEXT) {
    rule.re.lastIndex = 0;
    out = out.replace(rule.re, rule.replacement);
  }
  return out;
}

export function redactValue(value: unknown, key?: string): unknown {
  if (key !== undefined && SECRET_KEY.test(key) && value !== null && value !== "" && value !== MASK &&
      (typeof value === "string" || typeof value === "number")) {
    return MASK;
  }
  if (typeof value === "string") return redactText(value);
  if (Array.isArray(value)) return value.map((item) => redactValue(item, key));
  if (value && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = redactValue(v, k);
    return out;
  }
  return value;
}
