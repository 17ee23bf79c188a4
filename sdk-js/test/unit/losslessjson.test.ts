// The KV routes' JSON: integers past Number.MAX_SAFE_INTEGER as bigints, all else as JSON.parse.
import { describe, expect, it } from "vitest";
import { parseLossless, stringifyLossless } from "../../src/internal/losslessjson.js";

// A run of 16 digits in a string sends a text through the scan for unsafe integers, not straight to JSON.parse.
const slow = (doc: string) => `[${doc}, "1234567890123456"]`;

describe("parseLossless", () => {
  it("reads an unsafe integer as a bigint, at any depth, and every other number as JSON.parse does", () => {
    expect(parseLossless("9007199254740993")).toBe(9007199254740993n);
    expect(parseLossless("-9223372036854775808")).toBe(-9223372036854775808n);
    expect(parseLossless("9007199254740992")).toBe(9007199254740992n); // 2^53: 2^53+1 would read the same as a number
    expect(parseLossless("9007199254740991")).toBe(Number.MAX_SAFE_INTEGER);
    expect(parseLossless('{"a":[1,{"b":123456789012345678901234567890}],"c":-0}')).toEqual({ a: [1, { b: 123456789012345678901234567890n }], c: -0 });
    // A fraction or an exponent stays a number, rounded as JSON.parse rounds it.
    const text = "[12345678901234567.5, 1e300, 12345678901234567e2]";
    expect(parseLossless(text)).toEqual(JSON.parse(text));
    expect((parseLossless(text) as unknown[]).every((n) => typeof n === "number")).toBe(true);
    expect(parseLossless('"12345678901234567"')).toBe("12345678901234567");
  });

  it("matches JSON.parse on documents without unsafe integers", () => {
    const docs = [
      '{"results":[{"applied":true,"expiresAt":null,"index":0,"key":"a","value":{"x":[1,2.5,-3e-7,true,false,null,""]},"version":1}],"success":true}',
      ' { "esc" : "a\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00" , "empty":{}, "none":[] } ',
      '{"__proto__":{"polluted":1},"constructor":2}',
      "[]",
      "0",
    ];
    for (const doc of docs) {
      expect(parseLossless(slow(doc))).toEqual(JSON.parse(slow(doc)));
    }
    const proto = parseLossless(slow('{"__proto__":{"polluted":1}}')) as [Record<string, unknown>];
    expect(Object.getPrototypeOf(proto[0])).toBe(Object.prototype);
    expect(Object.keys(proto[0])).toEqual(["__proto__"]);
  });

  it("throws SyntaxError where JSON.parse does", () => {
    for (const bad of ["[1,]", '{"a":1,}', "[01]", '{"a" 1}', "[1] x", '"\\x"', '"a\nb"', "nul", "[", "{", "-", "1.", "+1", "'a'", ""]) {
      expect(() => JSON.parse(slow(bad)), bad).toThrow(SyntaxError);
      expect(() => parseLossless(slow(bad)), bad).toThrow(SyntaxError);
    }
  });
});

describe("stringifyLossless", () => {
  it("writes a bigint as its digits and everything else as JSON.stringify", () => {
    expect(stringifyLossless({ delta: 2n ** 63n - 1n, min: -(2n ** 63n), list: [1n, 2.5, "3n"], date: new Date(0) })).toBe(
      '{"delta":9223372036854775807,"min":-9223372036854775808,"list":[1,2.5,"3n"],"date":"1970-01-01T00:00:00.000Z"}',
    );
    const plain = { a: "lanes-bigint-x:1", b: [null, true], c: undefined };
    expect(stringifyLossless(plain)).toBe(JSON.stringify(plain));
    expect(parseLossless(stringifyLossless({ n: 2n ** 64n }))).toEqual({ n: 2n ** 64n });
  });
});

describe("parseLossless reads every answer JSON.parse reads", () => {
  it("at any depth: a 10,000-deep array or object, as JSON.parse", () => {
    const depth = 10_000;
    const array = parseLossless(`${"[".repeat(depth)}12345678901234567890${"]".repeat(depth)}`);
    let inner: unknown = array;
    for (let i = 0; i < depth; i++) inner = (inner as unknown[])[0];
    expect(inner).toBe(12345678901234567890n);
    const object = parseLossless(`${'{"a":'.repeat(depth)}-12345678901234567890${"}".repeat(depth)}`);
    inner = object;
    for (let i = 0; i < depth; i++) inner = (inner as Record<string, unknown>)["a"];
    expect(inner).toBe(-12345678901234567890n);
  });

  it("with a string of 10 million characters beside a bigint", () => {
    const long = "x".repeat(10_000_000);
    const escaped = '\\"\\\\'.repeat(2_500_000);
    const got = parseLossless(`{"s":"${long}","e":"${escaped}","n":12345678901234567890}`) as { s: string; e: string; n: bigint };
    expect(got.s).toBe(long);
    expect(got.e).toBe('"\\'.repeat(2_500_000));
    expect(got.n).toBe(12345678901234567890n);
  });

  it("as JSON.parse on generated documents, but for integers past Number.MAX_SAFE_INTEGER", () => {
    const random = seeded(20261206);
    for (let i = 0; i < 3000; i++) {
      const { text, value } = document(random, 0, true);
      const spaced = `${space(random)}${text}${space(random)}`;
      expect(canonical(parseLossless(spaced)), spaced).toBe(canonical(value));
      // Without an unsafe integer the hand parse (forced by the 16-digit string) gives exactly JSON.parse's value.
      const safe = `[${document(random, 0, false).text}, "1234567890123456"]`;
      expect(canonical(parseLossless(safe)), safe).toBe(canonical(JSON.parse(safe)));
    }
  });
});

// seeded is a small PRNG (mulberry32), so a failure names a document that comes back on every run.
function seeded(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pick<T>(random: () => number, from: readonly T[]): T {
  return from[Math.floor(random() * from.length)]!;
}

function space(random: () => number): string {
  return pick(random, ["", "", " ", "\t", "\n", "\r\n", "  \n\t"]);
}

const NUMBERS = [
  "0", "-0", "7", "-42", "9007199254740991", "-9007199254740991", "9007199254740992", "9007199254740993", "-9007199254740993",
  "9223372036854775807", "-9223372036854775808", "18446744073709551616", "-123456789012345678901234567890",
  "1.0", "-0.0", "0e0", "9007199254740993.0", "12345678901234567.5", "0.12345678901234567891", "1e400", "-1e400", "1E-400",
  "12345678901234567e2", "123.4567890123456789e-5", "2.5E+3", "1234567890123456",
];
// Each piece is [JSON text, the string it stands for].
const STRING_PIECES: readonly (readonly [string, string])[] = [
  ["a", "a"], ["1234567890123456789", "1234567890123456789"], ["-9007199254740993", "-9007199254740993"], ['\\"', '"'], ["\\\\", "\\"],
  ["\\/", "/"], ["\\u0000", "\u0000"], ["\\ud83d\\ude00", "\u{1f600}"], ["\u{1f600}", "\u{1f600}"], ["\\ud800", "\ud800"],
  ["\\b\\f\\n\\r\\t", "\b\f\n\r\t"], ["é", "é"], ["\u2028", "\u2028"], ["[1,{", "[1,{"], ["e+", "e+"], [" ", " "],
];
const KEYS = ["a", "b", "__proto__", "constructor", "0", "10", "2", "1234567890123456789", "k\\u0000"];

function isUnsafeInteger(text: string): boolean {
  return /^-?\d+$/.test(text) && !Number.isSafeInteger(Number(text));
}

interface Generated {
  text: string;
  value: unknown;
}

// document generates a JSON text and the value it stands for; unsafe: it may hold integers past Number.MAX_SAFE_INTEGER.
function document(random: () => number, depth: number, unsafe: boolean): Generated {
  const kind = depth > 5 ? Math.floor(random() * 5) : Math.floor(random() * 7);
  switch (kind) {
    case 0:
    case 1: {
      const text = pick(random, unsafe ? NUMBERS : NUMBERS.filter((n) => !isUnsafeInteger(n)));
      const integer = isUnsafeInteger(text);
      return { text, value: integer ? BigInt(text) : Number(text) };
    }
    case 2: {
      const pieces = Array.from({ length: Math.floor(random() * 5) }, () => pick(random, STRING_PIECES));
      return { text: `"${pieces.map((p) => p[0]).join("")}"`, value: pieces.map((p) => p[1]).join("") };
    }
    case 3:
      return pick(random, [{ text: "true", value: true }, { text: "false", value: false }, { text: "null", value: null }]);
    case 4: {
      const items = Array.from({ length: Math.floor(random() * 4) }, () => document(random, depth + 1, unsafe));
      return { text: `[${items.map((d) => space(random) + d.text + space(random)).join(",")}]`, value: items.map((d) => d.value) };
    }
    default: {
      const value: Record<string, unknown> = {};
      const members: string[] = [];
      for (let n = Math.floor(random() * 4); n > 0; n--) {
        const key = pick(random, KEYS);
        const member = document(random, depth + 1, unsafe);
        // JSON.parse makes every key an own property and keeps the last of duplicates.
        Object.defineProperty(value, JSON.parse(`"${key}"`) as string, { value: member.value, writable: true, enumerable: true, configurable: true });
        members.push(`${space(random)}"${key}"${space(random)}:${space(random)}${member.text}${space(random)}`);
      }
      return { text: `{${members.join(",")}}`, value };
    }
  }
}

// canonical writes a value with its types, -0, key order and prototypes, which toEqual overlooks.
function canonical(value: unknown): string {
  if (typeof value === "bigint") return `${value}n`;
  if (typeof value === "number") return Object.is(value, -0) ? "-0" : String(value);
  if (typeof value !== "object" || value === null) return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  const proto = Object.getPrototypeOf(value) === Object.prototype ? "" : "(prototype!)";
  return `${proto}{${Object.keys(value).map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(",")}}`;
}
