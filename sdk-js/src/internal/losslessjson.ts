// JSON for the KV routes, whose counters are int64 on the broker: JSON.parse reads every number
// as a double, so a counter past 2^53 would come back rounded. Node 20's JSON.parse gives a
// reviver no source text, hence this small parser; other routes keep JSON.parse.
import { randomBytes } from "node:crypto";

/** parseLossless is JSON.parse, but an integer literal (no fraction, no exponent) beyond Number.MAX_SAFE_INTEGER becomes a bigint; every other number stays a number. It throws SyntaxError on invalid JSON. */
export function parseLossless(text: string): unknown {
  // An unsafe integer has at least 16 digits; without such a run JSON.parse reads the same values.
  if (!/\d{16}/.test(text)) return JSON.parse(text);
  const p = new Parser(text);
  p.space();
  const value = p.value();
  p.space();
  if (p.at < text.length) p.fail("unexpected text after the value");
  return value;
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
// Control characters (U+0000 to U+001F) must be escaped in a JSON string.
// eslint-disable-next-line no-control-regex
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;

class Parser {
  at = 0;
  constructor(private readonly text: string) {}

  fail(why: string): never {
    throw new SyntaxError(`JSON: ${why} at position ${this.at}`);
  }
  space(): void {
    while (this.at < this.text.length && " \t\n\r".includes(this.text[this.at]!)) this.at++;
  }
  value(): unknown {
    const c = this.text[this.at];
    if (c === "{") return this.object();
    if (c === "[") return this.array();
    if (c === '"') return this.string();
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return v;
      }
    }
    return this.fail(c === undefined ? "unexpected end" : `unexpected ${JSON.stringify(c)}`);
  }
  number(): number | bigint {
    NUMBER.lastIndex = this.at;
    const m = NUMBER.exec(this.text);
    if (!m) return this.fail("bad number");
    this.at = NUMBER.lastIndex;
    const n = Number(m[0]);
    return m[1] === undefined && m[2] === undefined && !Number.isSafeInteger(n) ? BigInt(m[0]) : n;
  }
  string(): string {
    STRING.lastIndex = this.at;
    const m = STRING.exec(this.text);
    if (!m) return this.fail("bad string");
    this.at = STRING.lastIndex;
    return JSON.parse(m[0]) as string;
  }
  array(): unknown[] {
    const out: unknown[] = [];
    this.at++; // [
    this.space();
    if (this.text[this.at] === "]") {
      this.at++;
      return out;
    }
    for (;;) {
      this.space();
      out.push(this.value());
      this.space();
      const c = this.text[this.at++];
      if (c === "]") return out;
      if (c !== ",") this.fail("expected , or ]");
    }
  }
  object(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    this.at++; // {
    this.space();
    if (this.text[this.at] === "}") {
      this.at++;
      return out;
    }
    for (;;) {
      this.space();
      if (this.text[this.at] !== '"') this.fail("expected a key");
      const key = this.string();
      this.space();
      if (this.text[this.at++] !== ":") this.fail("expected :");
      this.space();
      // As JSON.parse: "__proto__" is an own key, never the prototype.
      Object.defineProperty(out, key, { value: this.value(), writable: true, enumerable: true, configurable: true });
      this.space();
      const c = this.text[this.at++];
      if (c === "}") return out;
      if (c !== ",") this.fail("expected , or }");
    }
  }
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
