// binloop's redactor in the bot: the rule set of binloop/core/redaction_rules.json (this
// package ships a byte-identical copy, ../redaction_rules.json), with the semantics of that
// file's "about" and docs/redaction.md, as binloop/core/redact.py applies them. A record's
// args and error text get the key-name rule, every text rule and the entropy rule before
// the record leaves the bot; tests/test_hanzo_bridge.py compares the output with Python's
// on the shared corpus.
import { readFileSync } from "node:fs";

type TextRuleData = {
  id: string;
  pattern: string;
  flags: string;
  secret_group: number;
  key_group?: number;
  scope: "any" | "text";
  needles?: string[];
};

type RulesData = {
  version: number;
  mask: string;
  keys: { word_pattern: string; secret_words: string[]; secret_phrases: [string, string][]; not_secret_last_words: string[] };
  text_rules: TextRuleData[];
  entropy: {
    token_pattern: string;
    min_length: number;
    min_bits_per_char: number;
    require_classes: string[];
    skip_if_starts_with: string[];
    exempt_patterns: string[];
    exempt_if_contains: string[];
  };
};

type TextRule = { id: string; re: RegExp; secretGroup: number; keyGroup: number | undefined; inCode: boolean; needles: string[]; folded: boolean };

export const RULES_URL = new URL("../redaction_rules.json", import.meta.url);
const DATA = JSON.parse(readFileSync(RULES_URL, "utf8")) as RulesData;
if (DATA.version !== 1) throw new Error(`${RULES_URL.pathname}: unsupported rule file version ${DATA.version}`);
export const MASK: string = DATA.mask;

const WORD = new RegExp(DATA.keys.word_pattern, "g");
const SECRET_WORDS = new Set(DATA.keys.secret_words);
const SECRET_PHRASES = new Set(DATA.keys.secret_phrases.map(([a, b]) => `${a} ${b}`));
const NOT_SECRET_LAST = new Set(DATA.keys.not_secret_last_words);

const TEXT_RULES: TextRule[] = DATA.text_rules.map((r) => ({
  id: r.id,
  re: new RegExp(r.pattern, `${r.flags}gd`),
  secretGroup: r.secret_group,
  keyGroup: r.key_group,
  inCode: r.scope === "any",
  needles: r.needles ?? [],
  folded: r.flags.includes("i"),
}));

const ENTROPY = DATA.entropy;
const ENTROPY_TOKEN = new RegExp(ENTROPY.token_pattern, "g");
// Python's fullmatch: the whole token.
const ENTROPY_EXEMPT = ENTROPY.exempt_patterns.map((p) => new RegExp(`^(?:${p})$`));
const ENTROPY_EXEMPT_WITHIN = ENTROPY.exempt_if_contains.map((p) => new RegExp(p));
const CHARACTER_CLASSES: Record<string, RegExp> = { lower: /[a-z]/, upper: /[A-Z]/, digit: /[0-9]/ };
const REQUIRED_CLASSES = ENTROPY.require_classes.map((name) => {
  const re = CHARACTER_CLASSES[name];
  if (re === undefined) throw new Error(`${RULES_URL.pathname}: unknown character class ${name}`);
  return re;
});

/** The lower-case words of a key: `awsSecretAccessKey` -> aws, secret, access, key. */
export function keyWords(key: string): string[] {
  return Array.from(key.matchAll(WORD), (m) => m[0].toLowerCase());
}

const secretKeys = new Map<string, boolean>();

/** Whether values under `key` are secrets (docs/redaction.md, "Key names"). */
export function isSecretKey(key: string): boolean {
  let known = secretKeys.get(key);
  if (known === undefined) {
    known = decideSecretKey(keyWords(key));
    if (secretKeys.size < 10000) secretKeys.set(key, known);
  }
  return known;
}

function decideSecretKey(words: string[]): boolean {
  if (words.length === 0 || NOT_SECRET_LAST.has(words[words.length - 1]!)) return false;
  if (SECRET_WORDS.has(words.join("")) || words.some((w) => SECRET_WORDS.has(w))) return true;
  for (let i = 1; i < words.length; i++) if (SECRET_PHRASES.has(`${words[i - 1]} ${words[i]}`)) return true;
  return false;
}

/** Shannon entropy of the characters of `token`, in bits per character (summed in
 * first-occurrence order, as Python's Counter does). */
export function shannonBits(token: string): number {
  const counts = new Map<string, number>();
  for (const c of token) counts.set(c, (counts.get(c) ?? 0) + 1);
  const size = token.length;
  let total = 0;
  for (const n of counts.values()) total += (n / size) * Math.log2(n / size);
  return -total;
}

export function isHighEntropy(token: string): boolean {
  if (token.length < ENTROPY.min_length) return false;
  if (ENTROPY.skip_if_starts_with.some((prefix) => token.startsWith(prefix))) return false;
  if (!REQUIRED_CLASSES.every((re) => re.test(token))) return false;
  if (ENTROPY_EXEMPT.some((re) => re.test(token)) || ENTROPY_EXEMPT_WITHIN.some((re) => re.test(token))) return false;
  return shannonBits(token) >= ENTROPY.min_bits_per_char;
}

/** Counts what it replaced (as binloop's Redactor does). */
export class Redactor {
  count = 0;

  private apply(text: string, code: boolean): string {
    const lower = text.toLowerCase();
    // Masking only removes text and the mask adds no needle: needles found in the
    // original text stay a superset of those in every intermediate text.
    for (const rule of TEXT_RULES) {
      if (code && !rule.inCode) continue;
      if (rule.needles.length > 0 && !rule.needles.some((n) => (rule.folded ? lower : text).includes(n))) continue;
      text = this.applyRule(rule, text);
    }
    return text;
  }

  /** Mask the union of the secret spans of every accepted match of `rule`. */
  private applyRule(rule: TextRule, text: string): string {
    const spans: [number, number][] = [];
    for (const match of text.matchAll(rule.re)) {
      if (rule.keyGroup !== undefined) {
        const key = match[rule.keyGroup];
        if (key === undefined || !isSecretKey(key)) continue;
      }
      const span = match.indices?.[rule.secretGroup];
      if (span !== undefined && span[0] < span[1]) spans.push([span[0], span[1]]);
    }
    if (spans.length === 0) return text;
    spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const out: string[] = [];
    let done = 0;
    for (const [start, end] of spans) {
      if (end <= done) continue;
      if (start >= done) {
        out.push(text.slice(done, start), MASK);
        this.count += 1;
      }
      done = end;
    }
    out.push(text.slice(done));
    return out.join("");
  }

  private entropy(text: string): string {
    return text.replace(ENTROPY_TOKEN, (token) => {
      if (!isHighEntropy(token)) return token;
      this.count += 1;
      return MASK;
    });
  }

  /** Free text: every text rule, no entropy rule. */
  text(value: string): string {
    return this.apply(value, false);
  }

  /** Text inside a record's args or error: every text rule and the entropy rule. */
  evidenceText(value: string): string {
    return this.entropy(this.apply(value, false));
  }

  /** Source code: only the unmistakable secret shapes (rules of scope "any"). */
  code(value: string): string {
    return this.apply(value, true);
  }

  /** A copy of a JSON value: secrets under secret keys, and in every string. */
  value(value: unknown, key?: string, entropy = false): unknown {
    if (key !== undefined && isSecretKey(key)) return this.maskAll(value);
    if (typeof value === "string") return entropy ? this.evidenceText(value) : this.text(value);
    if (Array.isArray(value)) return value.map((item) => this.value(item, undefined, entropy));
    if (value !== null && typeof value === "object") {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = this.value(v, k, entropy);
      return out;
    }
    return value;
  }

  private maskAll(value: unknown): unknown {
    if (Array.isArray(value)) return value.map((item) => this.maskAll(item));
    if (value !== null && typeof value === "object") {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = this.maskAll(v);
      return out;
    }
    if (value === "" || value === MASK) return value;
    if (typeof value === "string" || typeof value === "number") {
      this.count += 1;
      return MASK;
    }
    return value;
  }

  /** A record's args (a JSON object) and error text; every other field is an id. */
  record<T extends { args?: unknown; error?: unknown }>(rec: T): T {
    const clean: Record<string, unknown> = { ...rec };
    if (rec.args !== null && typeof rec.args === "object" && !Array.isArray(rec.args)) {
      clean.args = this.value(rec.args, undefined, true);
    }
    for (const [key, value] of Object.entries(rec)) {
      if (key.startsWith("error") && typeof value === "string") clean[key] = this.evidenceText(value);
    }
    return clean as T;
  }
}

export function redactArgs(args: Record<string, unknown>): Record<string, unknown> {
  return new Redactor().value(args, undefined, true) as Record<string, unknown>;
}

export function redactError(text: string): string {
  return new Redactor().evidenceText(text);
}
