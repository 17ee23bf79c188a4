// JSON for the KV routes, whose counters are int64 on the broker: JSON.parse reads every number
// as a double, so a counter past 2^53 would come back rounded. Node 20's JSON.parse gives a
// reviver no source text, hence a scan that hands JSON.parse such integers as marked strings;
// other routes keep JSON.parse.
import { randomBytes } from "node:crypto";

/** parseLossless is JSON.parse, but an integer literal (no fraction, no exponent) beyond Number.MAX_SAFE_INTEGER becomes a bigint; every other number stays a number. It throws SyntaxError on invalid JSON. */
export function parseLossless(text: string): unknown {
  // An unsafe integer has at least 16 digits; without such a run JSON.parse reads the same values.
  if (!/\d{16}/.test(text)) return JSON.parse(text);
  // JSON.parse reads the structure (any depth and length, as every other route); an unsafe integer
  // goes through it as a string holding a random marker, which no value of the broker's holds.
  const marker = `lanes-bigint-${randomBytes(12).toString("hex")}:`;
  const marked = markUnsafeIntegers(text, marker);
  if (marked === text) return JSON.parse(text);
  let value: unknown;
  try {
    value = JSON.parse(marked);
  } catch (err) {
    JSON.parse(text); // the error as the answer's own text places it
    throw err;
  }
  return restoreBigints(value, marker);
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const INTEGER = /^-?(?:0|[1-9]\d*)$/;

function isNumberChar(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || c === 0x65 || c === 0x45; // 0-9 - + . e E
}

/** markUnsafeIntegers writes every integer literal past Number.MAX_SAFE_INTEGER outside strings as the string marker + its digits; one string token for one number token keeps valid JSON valid and invalid JSON invalid. */
function markUnsafeIntegers(text: string, marker: string): string {
  const parts: string[] = [];
  let copied = 0;
  let at = 0;
  while (at < text.length) {
    const c = text.charCodeAt(at);
    if (c === QUOTE) {
      at = stringEnd(text, at);
    } else if (isNumberChar(c)) {
      const start = at;
      while (at < text.length && isNumberChar(text.charCodeAt(at))) at++;
      if (at - start < 16) continue;
      const literal = text.slice(start, at);
      if (INTEGER.test(literal) && !Number.isSafeInteger(Number(literal))) {
        parts.push(text.slice(copied, start), `"${marker}${literal}"`);
        copied = at;
      }
    } else {
      at++;
    }
  }
  if (copied === 0) return text;
  parts.push(text.slice(copied));
  return parts.join("");
}

/** stringEnd is the index past the string that opens at `open` (the text's end if it never closes: JSON.parse refuses it). */
function stringEnd(text: string, open: number): number {
  for (let from = open + 1; ; ) {
    const close = text.indexOf('"', from);
    if (close < 0) return text.length;
    let backslashes = 0;
    while (text.charCodeAt(close - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return close + 1;
    from = close + 1;
  }
}

/** restoreBigints turns each marked string back into its bigint, walking with a list rather than recursion, so depth costs no stack. */
function restoreBigints(root: unknown, marker: string): unknown {
  if (typeof root === "string") return root.startsWith(marker) ? BigInt(root.slice(marker.length)) : root;
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    // JSON.parse made each key, "__proto__" too, an own property: assigning sets that property.
    const holder = pending.pop() as Record<string, unknown> | unknown[];
    for (const key of Array.isArray(holder) ? holder.keys() : Object.keys(holder)) {
      const v = (holder as Record<string | number, unknown>)[key];
      if (typeof v === "string") {
        if (v.startsWith(marker)) (holder as Record<string | number, unknown>)[key] = BigInt(v.slice(marker.length));
      } else if (typeof v === "object" && v !== null) {
        pending.push(v);
      }
    }
  }
  return root;
}

/** stringifyLossless is JSON.stringify, but a bigint is written as its digits (JSON.stringify throws on one). */
export function stringifyLossless(value: unknown): string {
  let marker: string | undefined;
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== "bigint") return v;
    // A random marker no value of the caller's holds: the string it stands in is replaced below.
    marker ??= `lanes-bigint-${randomBytes(12).toString("hex")}`;
    return `${marker}:${v}`;
  });
  return marker === undefined ? text : text.replace(new RegExp(`"${marker}:(-?\\d+)"`, "g"), "$1");
}
