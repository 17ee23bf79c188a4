// The KV routes' JSON: integers past Number.MAX_SAFE_INTEGER as bigints, all else as JSON.parse.
import { describe, expect, it } from "vitest";
import { parseLossless, stringifyLossless } from "../../src/internal/losslessjson.js";

// A run of 16 digits in a string sends a text down the hand parse instead of JSON.parse.
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
