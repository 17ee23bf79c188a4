// docs/retries.md §8 as a table over the pure decision function, with a frozen clock.
import { describe, expect, it } from "vitest";
import { APIError, APITimeoutError, DEFAULT_RETRY_POLICY, Lanes, OutcomeUnknownError, decideRetry, kvOpsIdempotent, parseRetryHint, withDeadline, type RetryInput } from "../../src/index.js";
import { FakeServer, reply } from "./fakeserver.js";

const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
const headers = (h: Record<string, string>) => new Headers(h);
const base = (over: Partial<RetryInput>): RetryInput => ({
  policy: { ...DEFAULT_RETRY_POLICY },
  retries429: 0,
  retries5xx: 0,
  longPoll: false,
  now: NOW,
  random: 0,
  ...over,
});
const rfc850 = (t: number) => {
  const d = new Date(t);
  const day = d.toUTCString().slice(0, 3);
  const full = { Sun: "Sunday", Mon: "Monday", Tue: "Tuesday", Wed: "Wednesday", Thu: "Thursday", Fri: "Friday", Sat: "Saturday" }[day];
  const [, dd, mon, yyyy, time] = d.toUTCString().split(" ");
  return `${full}, ${dd}-${mon}-${yyyy!.slice(2)} ${time} GMT`;
};

describe("retry hint parsing", () => {
  it.each([
    [{ "retry-after-ms": "250" }, 250],
    [{ "retry-after": "1.5" }, 1500],
    [{ "retry-after": "1" }, 1000],
    [{ "retry-after": new Date(NOW + 3000).toUTCString() }, 3000],
    [{ "retry-after": rfc850(NOW + 3000) }, 3000],
    [{ "retry-after": "-1" }, undefined],
    [{ "retry-after": "0" }, undefined],
    [{ "retry-after-ms": "0" }, undefined],
    [{ "retry-after-ms": "0", "retry-after": "2" }, 2000],
    [{ "retry-after": "NaN" }, undefined],
    [{ "retry-after": "soon" }, undefined],
    [{ "retry-after": "Infinity" }, undefined],
    [{ "retry-after-ms": "abc", "retry-after": "2" }, 2000],
    [{}, undefined],
  ])("%j → %s", (h, want) => {
    expect(parseRetryHint(headers(h), NOW)).toBe(want);
  });
  it("a date in the past is no hint", () => {
    expect(parseRetryHint(headers({ "retry-after": new Date(NOW - 60_000).toUTCString() }), NOW)).toBeUndefined();
  });
  it("the asctime form is GMT whatever the local zone", () => {
    const tz = process.env.TZ;
    process.env.TZ = "America/New_York";
    try {
      const [wd, , , , time] = new Date(NOW + 3000).toUTCString().split(" ");
      const d = new Date(NOW + 3000);
      const mon = d.toUTCString().split(" ")[2];
      const asctime = `${wd!.slice(0, 3)} ${mon} ${String(d.getUTCDate()).padStart(2, " ")} ${time} ${d.getUTCFullYear()}`;
      expect(parseRetryHint(headers({ "retry-after": asctime }), NOW)).toBe(3000);
    } finally {
      if (tz === undefined) delete process.env.TZ;
      else process.env.TZ = tz;
    }
  });
});

// The hint grammar of docs/retries.md §3; sdk-go (TestParseRetryHint) and sdk-python
// (test_parse_hint_grammar) run the same table.
describe("retry hint grammar shared by the SDKs", () => {
  const now = Date.UTC(2026, 11, 4, 23, 59, 0); // a Friday
  const table: [retryAfter: string, retryAfterMs: string, want: number | undefined][] = [
    ["1.5", "", 1500],
    [" 2 ", "", 2000],
    ["+5", "", 5000],
    [".5", "", 500],
    ["1.", "", 1000],
    ["999999999", "", 999999999000],
    ["0", "", undefined],
    ["-1", "", undefined],
    ["1000000000", "", undefined],
    ["NaN", "", undefined],
    ["Infinity", "", undefined],
    ["inf", "", undefined],
    ["1e3", "", undefined],
    ["0x1p4", "", undefined],
    ["1_0", "", undefined],
    ["30 seconds", "", undefined],
    ["soon", "", undefined],
    ["", "", undefined],
    ["5", "250", 250],
    ["5", "0", 5000],
    ["5", "1e3", 5000],
    ["", "2.5", 2.5],
    // The three HTTP-date forms, GMT; the weekday is not checked.
    ["Sat, 05 Dec 2026 00:00:00 GMT", "", 60_000],
    ["Saturday, 05-Dec-26 00:00:00 GMT", "", 60_000],
    ["Sat Dec  5 00:00:00 2026", "", 60_000],
    ["Sat Dec 05 00:00:00 2026", "", 60_000],
    ["Sun, 05 Dec 2026 00:00:00 GMT", "", 60_000],
    ["Monday, 05-Dec-50 00:00:00 GMT", "", 757382460_000], // 50 is 2050
    ["Fri, 04 Dec 2026 23:59:00 GMT", "", undefined], // now
    ["Fri, 04 Dec 2026 23:58:00 GMT", "", undefined], // past
    ["Thursday, 01-Jan-70 00:00:00 GMT", "", undefined], // 70 is 1970
    // Anything else is no hint.
    ["Sat, 05 Dec 2026 00:00:00 UTC", "", undefined],
    ["Sat, 05 Dec 2026 00:00:00 +0000", "", undefined],
    ["Saturday, 05-Dec-26 00:00:00 EST", "", undefined],
    ["Sat, 05 Dec 2026 00:00:00", "", undefined],
    ["05 Dec 2026 00:00:00 GMT", "", undefined],
    ["sat, 05 dec 2026 00:00:00 gmt", "", undefined],
    ["Sat, 5 Dec 2026 00:00:00 GMT", "", undefined],
    ["Sat Dec 5 00:00:00 2026", "", undefined],
    ["Sat, 31 Feb 2027 00:00:00 GMT", "", undefined],
    ["Sat, 05 Dec 2026 24:00:00 GMT", "", undefined],
    ["Sat, 05 Dec 2026 00:00:60 GMT", "", undefined],
    ["2026-12-05T00:00:00Z", "", undefined],
    ["2026-12-05", "", undefined],
    ["Dec 2026", "", undefined],
  ];
  it.each(table)("Retry-After %j, retry-after-ms %j → %s", (retryAfter, retryAfterMs, want) => {
    const h: Record<string, string> = {};
    if (retryAfter !== "") h["retry-after"] = retryAfter;
    if (retryAfterMs !== "") h["retry-after-ms"] = retryAfterMs;
    expect(parseRetryHint(headers(h), now)).toBe(want);
  });
});

describe("decideRetry (docs/retries.md §8)", () => {
  it("429 Retry-After: 1 retries in place after 1 s", () => {
    const d = decideRetry(base({ status: 429, headers: headers({ "retry-after": "1" }) }));
    expect(d).toMatchObject({ action: "retry", kind: "429", delayMs: 1000, failover: false });
  });
  it("429 retry-after-ms: 250 → 250 ms", () => {
    expect(decideRetry(base({ status: 429, headers: headers({ "retry-after-ms": "250" }) }))).toMatchObject({ delayMs: 250 });
  });
  it("429 Retry-After: 1.5 → 1.5 s", () => {
    expect(decideRetry(base({ status: 429, headers: headers({ "retry-after": "1.5" }) }))).toMatchObject({ delayMs: 1500 });
  });
  it.each(["0", "-1", "NaN", "soon"])("429 Retry-After: %s → computed backoff", (v) => {
    expect(decideRetry(base({ status: 429, headers: headers({ "retry-after": v }) }))).toMatchObject({ action: "retry", delayMs: 500 });
  });
  it("429 above the cap: no sleep, stop with retryAfter", () => {
    expect(decideRetry(base({ status: 429, headers: headers({ "retry-after": "3600" }) }))).toMatchObject({ action: "stop", retryAfterMs: 3_600_000 });
  });
  it("429 budget spent on a push", () => {
    expect(decideRetry(base({ status: 429, retries429: 10 }))).toMatchObject({ action: "stop" });
    expect(decideRetry(base({ status: 429, retries429: 9 }))).toMatchObject({ action: "retry" });
  });
  it("429 on a long-poll pop is unbounded", () => {
    expect(decideRetry(base({ status: 429, retries429: 50, longPoll: true, headers: headers({ "retry-after": "1" }) }))).toMatchObject({ action: "retry", delayMs: 1000 });
    expect(decideRetry(base({ status: 429, retries429: 10_000, longPoll: true, policy: { ...DEFAULT_RETRY_POLICY, max429Attempts: 0 } }))).toMatchObject({ action: "retry" });
  });
  it("503 × 2 then success: delays 500 ms, 1 s; the third 503 stops", () => {
    expect(decideRetry(base({ status: 503, retries5xx: 0 }))).toMatchObject({ action: "retry", kind: "5xx", delayMs: 500 });
    expect(decideRetry(base({ status: 503, retries5xx: 1 }))).toMatchObject({ action: "retry", delayMs: 1000 });
    expect(decideRetry(base({ status: 503, retries5xx: 2 }))).toMatchObject({ action: "stop" });
  });
  it.each([408, 500, 502, 504])("%i is retried", (status) => {
    expect(decideRetry(base({ status }))).toMatchObject({ action: "retry", kind: "5xx" });
  });
  it("network failure is retried; retryAttempts 0 disables", () => {
    expect(decideRetry(base({ networkError: true }))).toMatchObject({ action: "retry" });
    expect(decideRetry(base({ networkError: true, policy: { ...DEFAULT_RETRY_POLICY, retryAttempts: 0 } }))).toMatchObject({ action: "stop" });
  });
  it("503 with x-should-retry: false → 1 attempt", () => {
    expect(decideRetry(base({ status: 503, headers: headers({ "x-should-retry": "false" }) }))).toMatchObject({ action: "stop" });
  });
  it("409 with x-should-retry: true → retried", () => {
    expect(decideRetry(base({ status: 409, headers: headers({ "x-should-retry": "true" }) }))).toMatchObject({ action: "retry", kind: "5xx" });
  });
  it.each([400, 401, 404, 409, 501])("%i stops", (status) => {
    expect(decideRetry(base({ status }))).toMatchObject({ action: "stop" });
  });
  it.each([403, 413])("%i is terminal even with x-should-retry: true", (status) => {
    expect(decideRetry(base({ status, headers: headers({ "x-should-retry": "true" }) }))).toMatchObject({ action: "stop", terminal: true });
  });
  it("failover to an untried healthy broker waits 0", () => {
    expect(decideRetry(base({ networkError: true, failoverAvailable: true }))).toMatchObject({ action: "retry", delayMs: 0, failover: true });
  });
  it("never sleeps past the deadline", () => {
    expect(decideRetry(base({ status: 503, headers: headers({ "retry-after": "1" }), deadline: NOW + 100 }))).toMatchObject({ action: "stop" });
    expect(decideRetry(base({ status: 429, headers: headers({ "retry-after": "1" }), deadline: NOW + 100 }))).toMatchObject({ action: "stop" });
  });
  it("jitter: random 0.999…, n = 3 → about 3 s", () => {
    const d = decideRetry(base({ status: 503, retries5xx: 3, random: 0.9999999, policy: { ...DEFAULT_RETRY_POLICY, retryAttempts: 5 } }));
    expect(d.action).toBe("retry");
    if (d.action === "retry") expect(d.delayMs).toBeCloseTo(3000, 0);
  });
  it("backoff is capped at maxRetryDelay", () => {
    const d = decideRetry(base({ status: 503, retries5xx: 10, policy: { ...DEFAULT_RETRY_POLICY, retryAttempts: 20 } }));
    expect(d).toMatchObject({ delayMs: 8000 });
  });
  it("cancellation wins", () => {
    expect(decideRetry(base({ status: 503, cancelled: true }))).toMatchObject({ action: "stop", reason: "cancelled" });
  });
  it("2xx is done", () => {
    expect(decideRetry(base({ status: 204 }))).toEqual({ action: "done" });
  });
});

describe("writes that are not idempotent (docs/retries.md §5)", () => {
  it.each([
    ["network failure after the send", { networkError: true }],
    ["503", { status: 503 }],
    ["500", { status: 500 }],
    ["408", { status: 408 }],
  ])("%s: stop, outcome unknown", (_name, over) => {
    expect(decideRetry(base({ notIdempotent: true, ...over }))).toMatchObject({ action: "stop", outcomeUnknown: true });
  });
  it("a failed connect proves nothing was sent: retried", () => {
    expect(decideRetry(base({ notIdempotent: true, networkError: true, notSent: true }))).toMatchObject({ action: "retry", kind: "5xx" });
  });
  it("429 and x-should-retry: true prove nothing was applied: retried", () => {
    expect(decideRetry(base({ notIdempotent: true, status: 429 }))).toMatchObject({ action: "retry", kind: "429" });
    expect(decideRetry(base({ notIdempotent: true, status: 503, headers: headers({ "x-should-retry": "true" }) }))).toMatchObject({ action: "retry" });
  });
  it("a 400 is a plain error", () => {
    const d = decideRetry(base({ notIdempotent: true, status: 400 }));
    expect(d).toMatchObject({ action: "stop" });
    expect(d).not.toHaveProperty("outcomeUnknown");
  });
  it("kvOpsIdempotent: reads and plain puts/deletes yes; incr, putIfAbsent, expect no", () => {
    expect(kvOpsIdempotent([{ op: "get" }, { op: "put" }, { op: "delete" }, { op: "getMany" }])).toBe(true);
    for (const op of [{ op: "incr" }, { op: "putIfAbsent" }, { op: "put", expect: 0 }, { op: "delete", expect: 3 }]) {
      expect(kvOpsIdempotent([{ op: "get" }, op])).toBe(false);
    }
  });
});

describe("transport: writes that are not idempotent", () => {
  it("an incr fails over past a refused connect, and stops with OutcomeUnknownError on a 503", async () => {
    const dead = await new FakeServer().start();
    const deadUrl = dead.url;
    await dead.close();
    const live = await new FakeServer().start();
    try {
      live.script(reply(200, { results: [{ index: 0, op: "incr", applied: true, value: 1, version: 1 }] }), reply(503, { error: "x", code: "unavailable" }));
      const lanes = new Lanes({ urls: [deadUrl, live.url], env: {}, retryDelayMillis: 1 });
      expect(await lanes.kv("ns").incr("k", 1, { forever: true })).toMatchObject({ value: 1 });
      const err = await lanes.kv("ns").incr("k", 1, { forever: true }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect((err as OutcomeUnknownError).cause).toMatchObject({ status: 503, code: "unavailable" });
      expect(live.seen).toHaveLength(2);
    } finally {
      await live.close();
    }
  });
});

describe("APIError text", () => {
  it("brokerMessage holds the broker's text alone; message keeps status and code", async () => {
    const s = await new FakeServer().start();
    try {
      s.script(reply(400, { error: "queue name too long", code: "bad_request" }), reply(404, "<html>nope</html>", { "content-type": "text/html" }));
      const lanes = new Lanes({ url: s.url, env: {} });
      const err = await lanes.kv("ns").get("k").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(APIError);
      expect(err).toMatchObject({ status: 400, code: "bad_request", brokerMessage: "queue name too long", message: "400 bad_request: queue name too long" });
      const proxyErr = await lanes.kv("ns").get("k").catch((e: unknown) => e);
      expect(proxyErr).toMatchObject({ status: 404, code: "", brokerMessage: "Not Found" });
    } finally {
      await s.close();
    }
  });
});

describe("withDeadline (docs/retries.md §3)", () => {
  it("a retry whose wait passes the deadline is not attempted: the last real error is thrown at once", async () => {
    const s = await new FakeServer().start();
    try {
      s.script(reply(503, { error: "busy", code: "unavailable" }, { "retry-after": "1" }), reply(429, { error: "slow down", code: "rate_limited" }, { "retry-after": "5" }));
      const q = new Lanes({ url: s.url, env: {} }).queue("q");
      let start = Date.now();
      const err = await withDeadline(100, () => q.push([1])).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(APIError);
      expect(err).toMatchObject({ status: 503, code: "unavailable" });
      expect(Date.now() - start).toBeLessThan(90);
      start = Date.now();
      await expect(withDeadline(1000, () => q.push([1]))).rejects.toMatchObject({ status: 429, retryAfter: 5000 });
      expect(Date.now() - start).toBeLessThan(900);
      expect(s.seen).toHaveLength(2);
    } finally {
      await s.close();
    }
  });
  it("an attempt still running at the deadline ends there; the earlier of nested deadlines wins", async () => {
    const s = await new FakeServer().start();
    try {
      s.otherwise(() => undefined); // never answers
      const q = new Lanes({ url: s.url, env: {} }).queue("q");
      const start = Date.now();
      const err = await withDeadline(150, () => withDeadline(10_000, () => q.push([1]))).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(APITimeoutError);
      expect(Date.now() - start).toBeLessThan(1000);
    } finally {
      await s.close();
    }
  });
});
