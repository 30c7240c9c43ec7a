// NATS subject tokens exactly as binloop escapes them (binloop/nats/subjects.py): A-Z a-z 0-9
// _ - stay, every other character becomes %XX per UTF-8 byte, and a token over 160
// characters keeps a prefix and ends with `~` and 32 hex of the value's sha256.
import { createHash } from "node:crypto";

const TOKEN_MAX_CHARS = 160;
const HASH_CHARS = 32;
const SAFE = /^[A-Za-z0-9_-]$/;

export function subjectToken(value: string | number): string {
  const text = String(value);
  let token = "";
  for (const ch of text) {
    if (SAFE.test(ch)) token += ch;
    else for (const byte of Buffer.from(ch, "utf8")) token += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  if (!token) token = "%";
  if (token.length <= TOKEN_MAX_CHARS) return token;
  const digest = createHash("sha256").update(text, "utf8").digest("hex").slice(0, HASH_CHARS);
  return `${token.slice(0, TOKEN_MAX_CHARS - HASH_CHARS - 1)}~${digest}`;
}
