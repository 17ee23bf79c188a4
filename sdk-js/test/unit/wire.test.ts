// Wire-level tests of the transport, the retry policy and the consume loop against a scripted
// local HTTP server.
import { inspect } from "node:util";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  APIConnectionError,
  BadRequestError,
  EmptyTransactionError,
  InternalServerError,
  Lanes,
  LanesError,
  NotFoundError,
  NotImplementedByBrokerError,
  PermissionDeniedError,
  PushError,
  RateLimitError,
  UnexpectedAnswerError,
  type LanesOptions,
} from "../../src/index.js";
import { FakeServer, popBody, reply, type Step } from "./fakeserver.js";

const servers: FakeServer[] = [];
async function fake(): Promise<FakeServer> {
  const s = await new FakeServer().start();
  servers.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
const client = (url: string | string[], o: LanesOptions = {}) =>
  new Lanes({ ...(Array.isArray(url) ? { urls: url } : { url }), retryDelayMillis: 10, env: {}, ...o });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** popGaps is the time between consecutive pops the server saw, in ms. */
const popGaps = (s: FakeServer) => {
  const at = s.seen.filter((r) => r.url.startsWith("/api/v1/pop")).map((r) => r.at);
  return at.slice(1).map((t, i) => t - at[i]!);
};
const pushed = (n: number, status = "queued") => Array.from({ length: n }, (_, i) => ({ index: i, message_id: `m${i}`, transaction_id: `t${i}`, queueName: "q", status }));

describe("retry policy on the wire", () => {
  it("429 with Retry-After: 1 twice, then 201: three attempts, ~1 s apart, in place", async () => {
    const s = (await fake()).script(reply(429, { error: "busy", code: "rate_limited" }, { "retry-after": "1" }), reply(429, { error: "busy", code: "rate_limited" }, { "retry-after": "1" }), reply(201, pushed(1)));
    const res = await client(s.url).queue("q").push([{ data: 1 }]);
    expect(res[0]?.status).toBe("queued");
    expect(s.seen).toHaveLength(3);
    expect(s.seen[1]!.at - s.seen[0]!.at).toBeGreaterThanOrEqual(950);
    expect(s.seen[2]!.at - s.seen[1]!.at).toBeGreaterThanOrEqual(950);
    expect(s.seen.map((r) => r.headers["x-retry-count"])).toEqual(["0", "1", "2"]);
    // the same transaction id on every attempt
    const ids = s.seen.map((r) => JSON.parse(r.body).items[0].transactionId);
    expect(new Set(ids).size).toBe(1);
    expect(ids[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it("429 on a long-poll pop is retried without a bound", async () => {
    const s = await fake();
    for (let i = 0; i < 50; i++) s.script(reply(429, { error: "busy", code: "rate_limited" }, { "retry-after-ms": "1" }));
    s.script(reply(200, popBody([{ transactionId: "a" }])));
    const msgs = await client(s.url, { max429Attempts: 2 }).queue("q").pop();
    expect(msgs.map((m) => m.transactionId)).toEqual(["a"]);
    expect(s.seen).toHaveLength(51);
  });

  it("429 is bounded elsewhere (max429Attempts) and surfaces RateLimitError", async () => {
    const s = (await fake()).otherwise(reply(429, { error: "busy", code: "rate_limited" }, { "retry-after-ms": "1" }));
    const err = await client(s.url, { max429Attempts: 3 }).queue("q").push([{ data: 1 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RateLimitError);
    expect((err as RateLimitError).code).toBe("rate_limited");
    expect(s.seen).toHaveLength(4);
    // a non-waiting pop is bounded too
    const s2 = (await fake()).otherwise(reply(429, { error: "busy", code: "rate_limited" }, { "retry-after-ms": "1" }));
    await expect(client(s2.url, { max429Attempts: 1 }).queue("q").wait(false).pop()).rejects.toBeInstanceOf(RateLimitError);
    expect(s2.seen).toHaveLength(2);
  });

  it("429 with a hint above maxRetryAfterMillis does not sleep", async () => {
    const s = (await fake()).script(reply(429, { error: "busy", code: "rate_limited" }, { "retry-after": "3600" }));
    const t0 = Date.now();
    const err = (await client(s.url).queue("q").push([{ data: 1 }]).catch((e: unknown) => e)) as RateLimitError;
    expect(err).toBeInstanceOf(RateLimitError);
    expect(err.retryAfter).toBe(3_600_000);
    expect(Date.now() - t0).toBeLessThan(500);
  });

  it("429 with an HTTP-date above maxRetryAfterMillis does not sleep and carries the hint", async () => {
    const at = new Date(Math.ceil(Date.now() / 1000) * 1000 + 3_600_000);
    const s = (await fake()).script(reply(429, { error: "busy", code: "rate_limited" }, { "retry-after": at.toUTCString() }));
    const err = (await client(s.url).queue("q").push([{ data: 1 }]).catch((e: unknown) => e)) as RateLimitError;
    expect(err).toBeInstanceOf(RateLimitError);
    expect(err.retryAfter).toBeGreaterThan(3_599_000);
    expect(err.retryAfter).toBeLessThanOrEqual(3_601_000);
    expect(s.seen).toHaveLength(1);
  });

  it("503 twice then 201 with retryAttempts 2; 503 × 3 fails with InternalServerError", async () => {
    const s = (await fake()).script(reply(503, { error: "down", code: "unavailable" }), reply(503, { error: "down", code: "unavailable" }), reply(201, pushed(1)));
    await client(s.url, { retryAttempts: 2 }).queue("q").push([{ data: 1 }]);
    expect(s.seen).toHaveLength(3);
    const s2 = (await fake()).otherwise(reply(503, { error: "down", code: "unavailable" }));
    const err = await client(s2.url, { retryAttempts: 2 }).queue("q").push([{ data: 1 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InternalServerError);
    expect((err as InternalServerError).attempts).toBe(3);
    expect(s2.seen).toHaveLength(3);
  });

  it("x-should-retry: false on a 503 stops after one attempt", async () => {
    const s = (await fake()).otherwise(reply(503, { error: "no", code: "unavailable" }, { "x-should-retry": "false" }));
    await expect(client(s.url).queue("q").push([{ data: 1 }])).rejects.toBeInstanceOf(InternalServerError);
    expect(s.seen).toHaveLength(1);
  });

  it.each([
    [400, BadRequestError],
    [403, PermissionDeniedError],
    [501, NotImplementedByBrokerError],
  ])("%i is one attempt", async (status, E) => {
    const s = (await fake()).otherwise(reply(status, { error: "x", code: "c" }, { "x-should-retry": status === 403 ? "true" : "" }));
    const err = await client(s.url).queue("q").push([{ data: 1 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(E);
    expect(s.seen).toHaveLength(1);
  });

  it("a non-JSON error body yields code ''", async () => {
    const s = (await fake()).otherwise((_q, res) => {
      res.writeHead(413, { "content-type": "text/html" });
      res.end("<html>too big</html>");
    });
    const err = (await client(s.url).queue("q").push([{ data: 1 }]).catch((e: unknown) => e)) as { code: string; status: number };
    expect(err.status).toBe(413);
    expect(err.code).toBe("");
  });

  it("fails over to the next URL at once on a connection failure", async () => {
    const s = (await fake()).script(reply(201, pushed(1)));
    const dead = "http://127.0.0.1:2"; // privileged and unused: connection refused
    const t0 = Date.now();
    await client([dead, s.url], { retryDelayMillis: 2000 }).queue("q").push([{ data: 1 }]);
    expect(Date.now() - t0).toBeLessThan(1500);
    expect(s.seen).toHaveLength(1);
  });

  it("no response at all → APIConnectionError after the retries", async () => {
    const err = await client("http://127.0.0.1:2", { retryAttempts: 1 }).queue("q").push([{ data: 1 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIConnectionError);
    expect((err as APIConnectionError).attempts).toBe(2);
  });

  it("a `failed` item throws PushError carrying every result", async () => {
    const s = (await fake()).script(reply(201, [...pushed(1), { index: 1, message_id: "", transaction_id: "t1", queueName: "q", status: "failed", error: "disk" }]));
    const err = (await client(s.url).queue("q").push([{ data: 1 }, { data: 2 }]).catch((e: unknown) => e)) as PushError;
    expect(err).toBeInstanceOf(PushError);
    expect(err.results.map((r) => r.status)).toEqual(["queued", "failed"]);
    expect(err.failed[0]?.error).toBe("disk");
    expect(err.items).toEqual([{ index: 1, transactionId: "t1", status: "failed", message: "disk" }]);
  });

  it("a `buffered` item is no error and is logged at warn level, as in Go and Python", async () => {
    const s = (await fake()).script(reply(201, pushed(2, "buffered")));
    const lines: { level: string; msg: string }[] = [];
    const logger = { debug: () => {}, info: () => {}, warn: (msg: string) => lines.push({ level: "warn", msg }), error: (msg: string) => lines.push({ level: "error", msg }) };
    const res = await client(s.url, { logger }).queue("q").push([{ data: 1 }, { data: 2 }]);
    expect(res.map((r) => r.status)).toEqual(["buffered", "buffered"]);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: "warn", msg: expect.stringMatching(/2 item\(s\) buffered on the broker's disk spool/) });
  });

  it("a bearerToken function that throws fails the call with its own error, unsent (as Go and Python)", async () => {
    const s = (await fake()).script(reply(503, { error: "x", code: "unavailable" }));
    const gone = new Error("token source gone");
    const first = await client(s.url, { bearerToken: () => { throw gone; } }).admin.getMaintenanceMode().catch((e: unknown) => e);
    expect(first).toBe(gone);
    expect(s.seen).toHaveLength(0);
    let asked = 0;
    const retry = await client(s.url, { bearerToken: () => { if (++asked > 1) throw gone; return "tok-1"; } }).admin.getMaintenanceMode().catch((e: unknown) => e);
    expect(retry).toBe(gone);
    expect(s.seen).toHaveLength(1);
  });

  it("asks a bearerToken function before every attempt, a retry included", async () => {
    const s = (await fake()).script(reply(503, { error: "x", code: "unavailable" }), reply(201, pushed(1)));
    let asked = 0;
    await client(s.url, { bearerToken: () => `tok-${++asked}` }).queue("q").push([{ data: 1 }]);
    expect(s.seen.map((r) => r.headers.authorization)).toEqual(["Bearer tok-1", "Bearer tok-2"]);
  });

  it("sends the bearer token and wire field names", async () => {
    const s = (await fake()).script(reply(201, pushed(2)));
    await client(s.url, { bearerToken: "tok" }).queue("orders").partition("c-42").push([{ transactionId: "x1", data: { a: 1 } }, "bare"]);
    expect(s.seen[0]!.headers.authorization).toBe("Bearer tok");
    expect(JSON.parse(s.seen[0]!.body)).toMatchObject({
      items: [
        { queue: "orders", partition: "c-42", payload: { a: 1 }, transactionId: "x1" },
        { queue: "orders", partition: "c-42", payload: "bare" },
      ],
    });
  });

  it("the SDK's requests go over node:http (Node's fetch costs about four times its CPU), a body with its length in bytes, not chunked", async () => {
    const s = (await fake()).script(reply(201, pushed(1)), reply(200, [{ index: 0, transactionId: "x1", success: true, error: null, leaseReleased: true, dlq: false, noop: false }]));
    const lanes = client(s.url);
    await lanes.queue("orders").push([{ transactionId: "x1", data: { text: "café ☕ 🚀" } }]);
    await lanes.ack({ transactionId: "x1", partitionId: "0193a1b2-7c3b-7d4e-8f90-aaaaaaaaaaaa", leaseId: "l1" }, "completed");
    expect(s.seen.map((r) => r.url)).toEqual(["/api/v1/push", "/api/v1/ack"]);
    for (const r of s.seen) {
      expect(r.headers["sec-fetch-mode"]).toBeUndefined(); // a header of Node's fetch alone
      expect(r.headers.connection).toBe("keep-alive");
      expect(r.headers["transfer-encoding"]).toBeUndefined();
      expect(r.headers["content-length"]).toBe(String(Buffer.byteLength(r.body)));
      expect(r.headers["content-type"]).toBe("application/json");
    }
    expect(JSON.parse(s.seen[0]!.body).items[0].payload).toEqual({ text: "café ☕ 🚀" });
    // A write that is not idempotent keeps Node's fetch, which reports whether a failed attempt left.
    s.script(reply(200, { results: [{ index: 0, op: "incr", applied: true, value: 1, version: 1 }] }));
    await lanes.kv("ns").incr("k", 1, { forever: true });
    expect(s.seen[2]!.headers["sec-fetch-mode"]).toBe("cors");
  });

  it("a 204 pop is an empty list; the wait=true attempt gets timeout + 5 s", async () => {
    const s = (await fake()).script(reply(204));
    const res = await client(s.url, { timeoutMillis: 100 }).queue("q").timeoutMillis(300).popResult();
    expect(res.messages).toEqual([]);
    expect(s.seen[0]!.url).toBe("/api/v1/pop/queue/q?autopilot=true&wait=true&timeout=300");
  });
});

describe("consume loop on the wire", () => {
  it("a 403 stops the loop; closed rejects with PermissionDeniedError", async () => {
    const s = (await fake()).otherwise(reply(403, { error: "Insufficient permissions", code: "forbidden" }));
    const errors: unknown[] = [];
    const c = client(s.url).queue("q").onError((e) => errors.push(e)).consume(() => {});
    await expect(c.closed).rejects.toBeInstanceOf(PermissionDeniedError);
    expect(s.seen).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(PermissionDeniedError);
  });

  it("a 501 stops the loop; closed rejects with NotImplementedByBrokerError (as in Go and Python)", async () => {
    const s = (await fake()).otherwise(reply(501, { error: "not implemented", code: "not_implemented" }));
    const errors: unknown[] = [];
    const c = client(s.url).queue("q").onError((e) => errors.push(e)).consume(() => {});
    await expect(c.closed).rejects.toBeInstanceOf(NotImplementedByBrokerError);
    expect(s.seen).toHaveLength(1);
    expect(errors).toHaveLength(1);
  });

  it("a 408 that outlived the retries stops the loop like any other 4xx (as in Go and Python)", async () => {
    const s = (await fake()).otherwise(reply(408, { error: "slow", code: "timeout" }));
    const c = client(s.url, { retryAttempts: 1 }).queue("q").consume(() => {});
    await expect(c.closed).rejects.toMatchObject({ status: 408 });
    expect(s.seen).toHaveLength(2);
  });

  it("a pop answered 200 with a body that is not JSON (a proxy's page) goes to onError and the loop goes on (as in Go and Python)", async () => {
    const s = (await fake()).script(
      (_req, res) => {
        res.writeHead(200, { "content-type": "text/html" });
        res.end("<html>portal</html>");
      },
      reply(200, popBody([{ transactionId: "a" }])),
      reply(200, { index: 0, transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false }),
    );
    const errors: unknown[] = [];
    const seen: string[] = [];
    await client(s.url)
      .queue("q")
      .wait(false)
      .limit(1)
      .onError((e) => errors.push(e))
      .consume((m) => {
        seen.push(m.transactionId);
      });
    expect(seen).toEqual(["a"]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(UnexpectedAnswerError);
  });

  it("429 budget spent on a non-waiting loop is transient: the loop sleeps Retry-After and goes on", async () => {
    const s = (await fake()).script(
      reply(429, { error: "busy", code: "rate_limited" }, { "retry-after-ms": "20" }),
      reply(200, popBody([{ transactionId: "a" }])),
      reply(200, [{ index: 0, transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false }]),
    );
    const errors: unknown[] = [];
    const seen: string[] = [];
    await client(s.url, { max429Attempts: 0 })
      .queue("q")
      .wait(false)
      .limit(1)
      .onError((e) => errors.push(e))
      .consume((m) => {
        seen.push(m.transactionId);
      });
    expect(seen).toEqual(["a"]);
    expect(errors[0]).toBeInstanceOf(RateLimitError);
    expect(s.seen[2]!.url).toBe("/api/v1/ack");
    expect(JSON.parse(s.seen[2]!.body)).toEqual({ transactionId: "a", partitionId: "p1", status: "completed", leaseId: "lease-1", consumerGroup: "__QUEUE_MODE__" });
  });

  it("nack abandons the rest of the partition and releases nothing else; other partitions go on", async () => {
    const s = (await fake()).script(
      reply(
        200,
        popBody([
          { transactionId: "a1", partitionId: "A" },
          { transactionId: "b1", partitionId: "B" },
          { transactionId: "a2", partitionId: "A" },
          { transactionId: "a3", partitionId: "A" },
          { transactionId: "b2", partitionId: "B" },
        ]),
      ),
      (_q, res) => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify([0, 1, 2].map((i) => ({ index: i, transactionId: "x", success: true, error: null, leaseReleased: false, dlq: false, noop: false }))));
      },
    );
    const handled: string[] = [];
    await client(s.url)
      .queue("q")
      .limit(4)
      .consume((m) => {
        handled.push(m.transactionId);
        if (m.transactionId === "a2") throw new Error("boom");
      });
    expect(handled).toEqual(["a1", "a2", "b1", "b2"]);
    const ack = JSON.parse(s.seen[1]!.body);
    expect(s.seen[1]!.url).toBe("/api/v1/ack/batch");
    // B completed whole: its last message commits b1 too (sdk-design.md §4, "Loop acks").
    expect(ack.acknowledgments.map((a: { transactionId: string; status: string }) => `${a.transactionId}:${a.status}`)).toEqual(["a1:completed", "a2:failed", "b2:completed"]);
    expect(ack.acknowledgments[1].error).toBe("boom");
  });

  it("empty non-waiting polls are paced by the broker's waitMs", async () => {
    const s = (await fake()).otherwise(reply(200, { ...popBody([]), autopilot: { partitions: 1, batch: 100, waitMs: 200 } }));
    const c = client(s.url).queue("q").wait(false).consume(() => {});
    await new Promise((r) => setTimeout(r, 700));
    await c.stop();
    expect(s.seen.length).toBeGreaterThanOrEqual(2);
    expect(s.seen.length).toBeLessThanOrEqual(5);
  });
});

describe("empty-poll pause after a waitMs: 0 echo (docs/consuming.md §3 step 2)", () => {
  // The broker echoes only on a 200, and there `waitMs` is 0; the 204s that follow carry no
  // echo. 0 is "no advice": the loop pauses 100 ms, it does not poll in a tight loop.
  const drained = async () =>
    (await fake())
      .script(
        reply(200, { ...popBody([{ transactionId: "a" }]), autopilot: { partitions: 1, batch: 100, waitMs: 0 } }),
        reply(200, { transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false }),
      )
      .otherwise(reply(204));
  const pops = (s: FakeServer) => s.seen.filter((r) => r.url.startsWith("/api/v1/pop")).length;

  it.each([
    ["wait(false)", (q: ReturnType<ReturnType<typeof client>["queue"]>) => q.wait(false)],
    ["timeoutMillis(0)", (q: ReturnType<ReturnType<typeof client>["queue"]>) => q.timeoutMillis(0)],
  ])("consume with %s pauses 100 ms between empty pops", async (_name, knob) => {
    const s = await drained();
    const c = knob(client(s.url).queue("q")).consume(() => {});
    await new Promise((r) => setTimeout(r, 500));
    await c.stop();
    expect(pops(s)).toBeGreaterThanOrEqual(3);
    expect(pops(s)).toBeLessThanOrEqual(8);
  });

  it("the messages() iterator with wait(false) pauses 100 ms between empty pops", async () => {
    const s = await drained();
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 500);
    const got: string[] = [];
    for await (const m of client(s.url).queue("q").wait(false).messages({ signal: ctl.signal })) got.push(m.transactionId);
    expect(got).toEqual(["a"]);
    expect(pops(s)).toBeGreaterThanOrEqual(3);
    expect(pops(s)).toBeLessThanOrEqual(8);
  });
});

describe("a waiting pop answered empty at once (docs/consuming.md §3 step 2)", () => {
  /** answerAfter answers 204 after `ms`, as a broker that parked the pop for that long. */
  const answerAfter =
    (ms: number): Step =>
    (req, res) =>
      void setTimeout(() => reply(204)(req, res), ms);

  it("is paced 100 ms, doubling on each such answer (not popped again at once)", async () => {
    const s = (await fake()).otherwise(reply(204));
    const c = client(s.url).queue("q").consume(() => {});
    await sleep(1200);
    await c.stop();
    // Pops at about 0, 100, 300, 700 ms; without pacing this is hundreds.
    const gaps = popGaps(s);
    expect(gaps.length).toBeGreaterThanOrEqual(2);
    expect(gaps.length).toBeLessThanOrEqual(4);
    gaps.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(100 * 2 ** i - 15));
  });

  it("the pause tops out at 2 s", async () => {
    const s = (await fake()).otherwise(reply(204));
    const c = client(s.url).queue("q").consume(() => {});
    await sleep(6500);
    await c.stop();
    // 100 + 200 + 400 + 800 + 1600 ms, then 2000 ms (not 3200).
    const gaps = popGaps(s);
    expect(gaps.length).toBe(6);
    expect(gaps[5]).toBeGreaterThanOrEqual(1985);
    expect(gaps[5]).toBeLessThan(2400);
  });

  it("a pop that waited, or one with messages, starts the pause again at 100 ms", async () => {
    // timeout 1 s: an empty answer before 100 ms is fast, one after 300 ms waited.
    const s = (await fake())
      .script(reply(204), reply(204), reply(204), answerAfter(300), reply(204), reply(204), reply(200, popBody([{ transactionId: "t1" }])), reply(204))
      .otherwise(answerAfter(1000));
    const handled: string[] = [];
    const c = client(s.url)
      .queue("q")
      .timeoutMillis(1000)
      .serverAutoAck(true)
      .consume((m) => void handled.push(m.transactionId));
    await sleep(2500);
    await c.stop();
    expect(handled).toEqual(["t1"]);
    const gaps = popGaps(s);
    expect(gaps.length).toBeGreaterThanOrEqual(8);
    // Fast answers paced 100, 200, 400 ms; the one that waited resets: popped again at once, then 100, 200 ms; the message resets.
    expect(gaps.slice(0, 3).map((g, i) => g >= 100 * 2 ** i - 15)).toEqual([true, true, true]);
    expect(gaps[3]).toBeLessThan(400);
    expect(gaps[4]).toBeGreaterThanOrEqual(85);
    expect(gaps[4]).toBeLessThan(190);
    expect(gaps[5]).toBeGreaterThanOrEqual(185);
    expect(gaps[6]).toBeLessThan(100);
    expect(gaps[7]).toBeGreaterThanOrEqual(85);
    expect(gaps[7]).toBeLessThan(190);
  });

  it("the messages() iterator is paced the same way", async () => {
    const s = (await fake()).otherwise(reply(204));
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 1200);
    for await (const m of client(s.url).queue("q").messages({ signal: ctl.signal })) expect(m).toBeUndefined();
    const gaps = popGaps(s);
    expect(gaps.length).toBeGreaterThanOrEqual(2);
    expect(gaps.length).toBeLessThanOrEqual(4);
  });
});

describe("a 429 with Retry-After: 0 on a waiting pop (docs/retries.md §3)", () => {
  it("waits the computed backoff, not 0", async () => {
    const s = (await fake()).otherwise(reply(429, { error: "slow down", code: "rate_limited" }, { "retry-after": "0" }));
    const c = client(s.url, { retryDelayMillis: 100 }).queue("q").consume(() => {});
    await sleep(1000);
    await c.stop();
    // Backoff 100, 200, 400 ms (less up to 25 % jitter); with the 0 taken as a hint this is hundreds.
    expect(popGaps(s).length).toBeGreaterThanOrEqual(2);
    expect(popGaps(s).length).toBeLessThanOrEqual(5);
  });
});

describe("ack errors in a consume loop or iterator (docs/consuming.md §4)", () => {
  const onePop = () => reply(200, popBody([{ transactionId: "a" }]));
  const failure = (status: number) => reply(status, { error: `status ${status}`, code: "x" });
  /** dropConnection closes the connection without an answer: the ack call fails with APIConnectionError. */
  const dropConnection = (): Step => (_req, res) => res.socket?.destroy();
  // No retries, no 429 budget: each ack answer is final at once.
  const opts: LanesOptions = { retryAttempts: 0, max429Attempts: 0 };

  it.each([400, 401, 403, 404, 413, 422, 501])("an ack answered %i ends the loop with that error, as on a pop", async (status) => {
    const s = (await fake()).script(onePop(), failure(status)).otherwise(reply(204));
    const errors: unknown[] = [];
    const c = client(s.url, opts).queue("q").onError((e) => errors.push(e)).consume(() => {});
    await expect(c.closed).rejects.toMatchObject({ status });
    expect(errors).toHaveLength(1);
    expect(c.error).toBe(errors[0]);
  });

  const acked = () => reply(200, { index: 0, transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false });

  it.each([408, 409])("an ack answered %i is reported and the loop goes on", async (status) => {
    const s = (await fake()).script(onePop(), failure(status), onePop(), acked()).otherwise(reply(204));
    const errors: unknown[] = [];
    let handled = 0;
    const c = client(s.url, opts)
      .queue("q")
      .onError((e) => errors.push(e))
      .consume(() => void (handled += 1));
    await vi.waitFor(() => expect(handled).toBe(2));
    await c.stop();
    await expect(c.closed).resolves.toBeUndefined();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ status });
  });

  // A broker that fails (no answer, 5xx, 429) is resent the ack after the loop's backoff (1 s;
  // a 429's own hint), until it lands; before, the loop gave up at once and the pop redelivered
  // after its lease.
  it.each([
    ["answered 429", reply(429, { error: "busy", code: "rate_limited" }, { "retry-after-ms": "300" }), 429],
    ["answered 500", failure(500), 500],
    ["answered 503", failure(503), 503],
    ["cut off", dropConnection(), undefined],
  ] as const)("an ack %s is reported and resent until it lands, then the loop goes on", async (_name, ackStep, status) => {
    const s = (await fake()).script(onePop(), ackStep, acked(), onePop(), acked()).otherwise(reply(204));
    const errors: unknown[] = [];
    let handled = 0;
    const c = client(s.url, opts)
      .queue("q")
      .onError((e) => errors.push(e))
      .consume(() => void (handled += 1));
    await vi.waitFor(() => expect(handled).toBe(2), { timeout: 3000 });
    await c.stop();
    await expect(c.closed).resolves.toBeUndefined();
    expect(errors).toHaveLength(1);
    if (status === undefined) expect(errors[0]).toBeInstanceOf(APIConnectionError);
    else expect(errors[0]).toMatchObject({ status });
    expect(s.seen.filter((r) => r.url.startsWith("/api/v1/ack"))).toHaveLength(3);
  });

  // As in the loop: before, the iterator gave up at once and the pop redelivered after its lease.
  it.each([
    ["answered 429", reply(429, { error: "busy", code: "rate_limited" }, { "retry-after-ms": "300" }), RateLimitError],
    ["answered 503", failure(503), InternalServerError],
    ["cut off", dropConnection(), APIConnectionError],
  ] as const)("messages(): an ack %s goes to onError and is resent until it lands, then the iteration goes on", async (_name, ackStep, want) => {
    const released = reply(200, { index: 0, transactionId: "b", success: true, error: null, leaseReleased: true, dlq: false, noop: false });
    const s = (await fake()).script(onePop(), ackStep, acked(), reply(200, popBody([{ transactionId: "b" }])), released).otherwise(reply(204));
    const errors: unknown[] = [];
    const got: string[] = [];
    for await (const m of client(s.url, opts).queue("q").onError((e) => errors.push(e)).messages()) {
      got.push(m.transactionId);
      if (got.length === 2) break;
    }
    expect(got).toEqual(["a", "b"]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(want);
    expect(s.seen.filter((r) => r.url.startsWith("/api/v1/ack"))).toHaveLength(3);
  });

  it("messages(): an ack answered 404 ends the iteration by throwing it", async () => {
    const s = (await fake()).script(onePop(), failure(404)).otherwise(reply(204));
    const errors: unknown[] = [];
    const got: string[] = [];
    const iterate = async () => {
      for await (const m of client(s.url, opts).queue("q").onError((e) => errors.push(e)).messages()) got.push(m.transactionId);
    };
    await expect(iterate()).rejects.toBeInstanceOf(NotFoundError);
    expect(got).toEqual(["a"]);
    expect(errors).toEqual([]);
  });

  it("messages(): an ack answered 404 when the caller leaves early is thrown from the loop", async () => {
    const s = (await fake()).script(onePop(), failure(404)).otherwise(reply(204));
    const iterate = async () => {
      for await (const m of client(s.url, opts).queue("q").batch(1).messages()) if (m) break;
    };
    await expect(iterate()).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe("errors without onError are logged at warning level (docs/consuming.md §4)", () => {
  const failure = reply(503, { error: "busy", code: "unavailable" });
  const opts: LanesOptions = { retryAttempts: 0 };

  it("by default one console.warn line per error, naming the operation", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const acked = reply(200, { index: 0, transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false });
      const s = (await fake()).script(reply(200, popBody([{ transactionId: "a" }])), failure, acked, failure).otherwise(reply(204));
      let handled = 0;
      const c = client(s.url, opts).queue("q").consume(() => void (handled += 1));
      await vi.waitFor(() => expect(warn).toHaveBeenCalledTimes(2), { timeout: 3000 });
      await c.stop();
      expect(handled).toBe(1);
      expect(warn.mock.calls).toEqual([["lanes: consume: ack: 503 unavailable: busy"], ["lanes: consume: pop: 503 unavailable: busy"]]);

      warn.mockClear();
      const s2 = (await fake()).script(failure).otherwise(reply(204));
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 300);
      for await (const m of client(s2.url, opts).queue("q").messages({ signal: ctl.signal })) expect(m).toBeUndefined();
      expect(warn.mock.calls).toEqual([["lanes: messages: pop: 503 unavailable: busy"]]);
    } finally {
      warn.mockRestore();
    }
  });

  it("a logger given to the client gets them instead; logger: null silences them", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const lines: string[] = [];
      const s = (await fake()).script(failure).otherwise(reply(204));
      const c = client(s.url, { ...opts, logger: { warn: (m: string) => lines.push(m) } }).queue("q").consume(() => {});
      await vi.waitFor(() => expect(lines).toHaveLength(1));
      await c.stop();
      expect(lines).toEqual(["lanes: consume: pop: 503 unavailable: busy"]);

      const s2 = (await fake()).script(failure).otherwise(reply(204));
      const quiet = client(s2.url, { ...opts, logger: null }).queue("q").consume(() => {});
      await vi.waitFor(() => expect(s2.seen).toHaveLength(1));
      await sleep(50);
      await quiet.stop();
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
    }
  });
});

describe("ack answers", () => {
  const target = { transactionId: "a", partitionId: "p1", leaseId: "L" };
  const result = { index: 0, transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false };

  it("a single ack reads the array of one result the spec documents", async () => {
    const s = (await fake()).script(reply(200, [result]));
    expect(await client(s.url).ack(target)).toEqual(result);
    expect(s.seen[0]!.url).toBe("/api/v1/ack");
  });

  it("a single ack still reads the result object alone that earlier brokers answered", async () => {
    const s = (await fake()).script(reply(200, result));
    expect(await client(s.url).ack(target)).toEqual(result);
  });

  it("a single ack answered with two results is an UnexpectedAnswerError, not a result", async () => {
    const s = (await fake()).script(reply(200, [result, result]));
    await expect(client(s.url).ack(target)).rejects.toMatchObject({ constructor: UnexpectedAnswerError, message: "ack: /api/v1/ack answered an array of 2, want an array of one result", status: 0, body: [result, result] });
  });
});

describe("a 2xx answer the SDK cannot use is an UnexpectedAnswerError (as Go's *UnexpectedAnswerError)", () => {
  const html = "<html><body>Welcome to the proxy</body></html>";

  it("a push answered 201 [] for one item: status 0, the answer as body, not a PushError", async () => {
    const s = (await fake()).script(reply(201, []));
    const err: unknown = await client(s.url).queue("q").push([{ data: 1 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnexpectedAnswerError);
    expect(err).not.toBeInstanceOf(PushError);
    expect(err).toMatchObject({ message: "push: broker answered 0 results for 1 items", status: 0, body: [] });
  });

  it("a push answered 200 with an HTML page: its status and text, sent once", async () => {
    const s = (await fake()).script(reply(200, html, { "content-type": "text/html" }));
    const err: unknown = await client(s.url).queue("q").push([{ data: 1 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnexpectedAnswerError);
    expect(err).toMatchObject({ status: 200, body: html });
    expect((err as Error).message).toMatch(/^POST \/api\/v1\/push: cannot decode the answer: /);
    expect(s.seen).toHaveLength(1);
  });

  it("an ack of two messages answered with one result", async () => {
    const one = { index: 0, transactionId: "a", success: true, error: null, leaseReleased: true, dlq: false, noop: false };
    const s = (await fake()).script(reply(200, [one]));
    const targets = [
      { transactionId: "a", partitionId: "p1", leaseId: "L" },
      { transactionId: "b", partitionId: "p1", leaseId: "L" },
    ];
    await expect(client(s.url).ack(targets)).rejects.toMatchObject({ constructor: UnexpectedAnswerError, message: "ack: broker answered 1 results for 2 items", status: 0, body: [one] });
  });

  it("a KV get and a timer schedule answered with no result", async () => {
    const s = (await fake()).script(reply(200, { results: [] }), reply(200, {}));
    const c = client(s.url);
    await expect(c.kv("ns").get("k")).rejects.toMatchObject({ constructor: UnexpectedAnswerError, message: "kv: broker answered 0 results for 1 operations", status: 0 });
    await expect(c.timers("q").schedule("k", { delayMillis: 1000 })).rejects.toMatchObject({ constructor: UnexpectedAnswerError, message: "timers: broker answered 0 results for 1 operations", body: {} });
  });

  it("a consume loop whose ack is answered with an HTML page reports it and goes on", async () => {
    const released = { index: 0, transactionId: "b", success: true, error: null, leaseReleased: true, dlq: false, noop: false };
    const s = (await fake()).script(reply(200, popBody([{ transactionId: "a" }])), reply(200, html), reply(200, popBody([{ transactionId: "b" }])), reply(200, released)).otherwise(reply(204));
    const errors: unknown[] = [];
    const handled: string[] = [];
    const c = client(s.url, { retryAttempts: 0 })
      .queue("q")
      .onError((e) => errors.push(e))
      .consume((m) => void handled.push(m.transactionId));
    await vi.waitFor(() => expect(handled).toEqual(["a", "b"]));
    await c.stop();
    await expect(c.closed).resolves.toBeUndefined();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(UnexpectedAnswerError);
  });
});

describe("transaction", () => {
  it("an empty bundle throws EmptyTransactionError and sends nothing", async () => {
    const s = await fake();
    await expect(client(s.url).transaction().commit()).rejects.toBeInstanceOf(EmptyTransactionError);
    expect(s.seen).toHaveLength(0);
  });

  it("a lease-less ack (withoutLease) throws LanesError and sends nothing: a transaction ack has no lease-less form (as Go and Python)", async () => {
    const s = await fake();
    const m = { transactionId: "in-1", partitionId: "p-1", leaseId: "L" };
    expect(() => client(s.url).transaction().ack(m as never, "completed", { withoutLease: true })).toThrow(
      new LanesError("lanes: a transaction ack cannot be lease-less (withoutLease)"),
    );
    expect(s.seen).toHaveLength(0);
  });

  it("sends one nested push op per queue().push() call, acks with their lease and every distinct lease in requiredLeases (as Go and Python)", async () => {
    const s = await fake();
    s.script(reply(200, { transactionId: "x", success: true, results: [] }));
    const m = { transactionId: "in-1", partitionId: "p-1", leaseId: "L", consumerGroup: "g" };
    await client(s.url)
      .transaction()
      .queue("orders").partition("eu/1").push<unknown>([{ data: { n: 1 }, transactionId: "t-1", traceId: "trace-1" }, { data: 2, transactionId: "t-2" }])
      .ack(m as never, "completed")
      .queue("plain").push([{ data: 7, transactionId: "x" }])
      .ack({ transactionId: "in-2", partitionId: "p-2", leaseId: "L2" } as never, "failed")
      .ack({ transactionId: "in-3", partitionId: "p-3", leaseId: "L" } as never, "completed")
      .commit();
    const body = JSON.parse(s.seen[0]!.body) as { operations: Record<string, unknown>[]; requiredLeases: string[] };
    expect(body.operations).toEqual([
      { type: "push", items: [
        { queue: "orders", partition: "eu/1", payload: { n: 1 }, transactionId: "t-1", traceId: "trace-1" },
        { queue: "orders", partition: "eu/1", payload: 2, transactionId: "t-2" },
      ] },
      expect.objectContaining({ type: "ack", transactionId: "in-1", partitionId: "p-1", status: "completed", consumerGroup: "g", leaseId: "L" }),
      { type: "push", items: [{ queue: "plain", payload: 7, transactionId: "x" }] },
      expect.objectContaining({ type: "ack", transactionId: "in-2", partitionId: "p-2", status: "failed", leaseId: "L2" }),
      expect.objectContaining({ type: "ack", transactionId: "in-3", partitionId: "p-3", status: "completed", leaseId: "L" }),
    ]);
    expect([...body.requiredLeases].sort()).toEqual(["L", "L2"]);
  });
});

describe("bearer token", () => {
  it("is sent on every request but never shown by util.inspect or JSON.stringify of the client", async () => {
    const token = "eyJ-secret-token-value";
    const s = (await fake()).script(reply(201, pushed(1)));
    const c = client(s.url, { bearerToken: token });
    expect(inspect(c, { depth: Infinity, showHidden: true })).not.toContain(token);
    expect(JSON.stringify(c)).not.toContain(token);
    expect(String(c)).not.toContain(token);
    await c.queue("q").push([{ data: 1 }]);
    expect(s.seen[0]!.headers.authorization).toBe(`Bearer ${token}`);
  });
});
