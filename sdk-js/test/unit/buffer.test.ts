// The push buffer's batch policy against a scripted local server: splitting a refused batch and
// making a drop visible.
import { afterEach, describe, expect, it, vi } from "vitest";
import { ClientClosedError, InvalidNameError, Lanes, UnexpectedAnswerError, UnsentError } from "../../src/index.js";
import { FakeServer, reply, type Step } from "./fakeserver.js";

const servers: FakeServer[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

/** broker answers like the push route, with 413 for a body over `limit` bytes. */
const broker =
  (limit: number): Step =>
  (req, res) => {
    if (req.body.length > limit) return reply(413, { error: "body too large", code: "payload_too_large" })(req, res);
    const items = (JSON.parse(req.body) as { items: { transactionId: string }[] }).items;
    reply(201, items.map((it, i) => ({ index: i, message_id: `m-${it.transactionId}`, transaction_id: it.transactionId, queueName: "q", status: "queued" })))(req, res);
  };
const sentIds = (s: FakeServer, limit: number) =>
  s.seen.filter((r) => r.body.length <= limit).flatMap((r) => (JSON.parse(r.body) as { items: { transactionId: string }[] }).items.map((it) => it.transactionId));

describe("push buffer batches", () => {
  it("halves a batch refused with 413 until only the item too big alone is dropped", async () => {
    const limit = 3000;
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(broker(limit));
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const dropped: { transactionId: string }[] = [];
    const b = lanes.queue("q").buffer({ messageCount: 10, timeMillis: 60_000, onError: (_e, items) => dropped.push(...(items as { transactionId: string }[])) });
    await b.push(Array.from({ length: 10 }, (_, i) => ({ data: (i === 7 ? "y" : "x").repeat(i === 7 ? 2 * limit : 500), transactionId: `tx-${i}` })));
    await b.flush();
    expect(sentIds(s, limit).sort()).toEqual(["tx-0", "tx-1", "tx-2", "tx-3", "tx-4", "tx-5", "tx-6", "tx-8", "tx-9"]);
    expect(dropped.map((d) => d.transactionId)).toEqual(["tx-7"]);
  });

  it("a flush answered 201 [] is retried under the same transaction ids, not dropped", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.script(reply(201, [])).otherwise(broker(Infinity));
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const errors: unknown[] = [];
    const dropped: unknown[] = [];
    const b = lanes.queue("q").buffer({ timeMillis: 60_000, retryDelayMillis: 10, onError: (e, items) => (errors.push(e), dropped.push(...items)) });
    await b.push([{ data: 1, transactionId: "tx-1" }]);
    await b.flush();
    expect(sentIds(s, Infinity)).toEqual(["tx-1", "tx-1"]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(UnexpectedAnswerError);
    expect(dropped).toEqual([]);
  });

  it("a 403 drops the batch whole, without splitting", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(reply(403, { error: "no", code: "forbidden" }));
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const dropped: unknown[] = [];
    const b = lanes.queue("q").buffer({ timeMillis: 60_000, onError: (_e, items) => dropped.push(...items) });
    await b.push([1, 2, 3]);
    await b.flush();
    expect(s.seen).toHaveLength(1);
    expect(dropped).toHaveLength(3);
  });

  it.each([401, 404, 409, 500, 422])("a flush answered %i is kept and retried, not dropped (as in Go and Python)", async (status) => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.script(reply(status, { error: "not now", code: "x" })).otherwise(broker(Infinity));
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const errors: unknown[] = [];
    const dropped: unknown[] = [];
    const b = lanes.queue("q").buffer({ timeMillis: 60_000, retryDelayMillis: 10, onError: (e, items) => (errors.push(e), dropped.push(...items)) });
    await b.push([{ data: 1, transactionId: "tx-1" }, { data: 2, transactionId: "tx-2" }]);
    await b.flush();
    expect(sentIds(s, Infinity)).toEqual(["tx-1", "tx-2", "tx-1", "tx-2"]);
    expect(errors).toHaveLength(1);
    expect(dropped).toEqual([]);
  });

  it("reports the items one flush drops in one onError call and one log line", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(reply(400, { error: "no", code: "validation_failed" }));
    const consoleError = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {} });
    const calls: unknown[][] = [];
    const b = lanes.queue("q").buffer({ timeMillis: 60_000, onError: (_e, items) => calls.push(items) });
    await b.push(Array.from({ length: 8 }, (_, i) => ({ data: i, transactionId: `tx-${i}` })));
    await b.flush();
    expect(calls).toHaveLength(1);
    expect((calls[0] as { transactionId: string }[]).map((d) => d.transactionId)).toEqual(["tx-0", "tx-1", "tx-2", "tx-3", "tx-4", "tx-5", "tx-6", "tx-7"]);
    expect(consoleError).toHaveBeenCalledTimes(1);
  });

  it("refuses a buffer for a name the broker refuses, before anything is buffered or sent", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(broker(1_000_000));
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    for (const [queue, partition, field] of [
      ["  ", undefined, "queue"],
      [".", undefined, "queue"],
      ["..", undefined, "queue"],
      ["a\u0000b", undefined, "queue"],
      ["q".repeat(513), undefined, "queue"],
      ["\uD800", undefined, "queue"],
      ["q", "..", "partition"],
      ["q", "é".repeat(257), "partition"],
      ["q", " \t", "partition"],
    ] as const) {
      const qb = partition === undefined ? lanes.queue(queue) : lanes.queue(queue).partition(partition);
      let caught: unknown;
      try {
        qb.buffer({ timeMillis: 60_000 });
      } catch (err) {
        caught = err;
      }
      expect(caught, `${queue}/${partition}`).toBeInstanceOf(InvalidNameError);
      expect((caught as InvalidNameError).field).toBe(field);
    }
    const ok = lanes.queue("q".repeat(512)).partition("p").buffer({ timeMillis: 60_000 });
    await ok.push([1]);
    await ok.flush();
    expect(s.seen).toHaveLength(1);
  });

  it("a drop is logged to the console when no logger is configured", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(reply(400, { error: "no", code: "bad_request" }));
    const consoleError = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {} });
    const b = lanes.queue("q").buffer({ timeMillis: 60_000 });
    await b.push([{ data: 1, transactionId: "tx-lost" }]);
    await b.flush();
    expect(consoleError).toHaveBeenCalledTimes(1);
    expect(String(consoleError.mock.calls[0]![0])).toMatch(/1 item\(s\) dropped/);
    expect(consoleError.mock.calls[0]![1]).toEqual({ transactionIds: ["tx-lost"] });
  });

  it("flush() and flushAll() are bounded (default 30 s) and reject with UnsentError naming what is left, as Go's ctx and Python's timeout", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(() => undefined); // never answers
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const a = lanes.queue("q").partition("a").buffer({ timeMillis: 60_000 });
    const b = lanes.queue("q").partition("b").buffer({ timeMillis: 60_000 });
    await a.push([1, 2]);
    await b.push([3]);
    const t0 = Date.now();
    const all = await lanes.flushAll({ timeoutMillis: 300 }).catch((e: unknown) => e);
    expect(all).toBeInstanceOf(UnsentError);
    expect((all as UnsentError).unsent).toBe(3);
    const one = await a.flush({ timeoutMillis: 200 }).catch((e: unknown) => e);
    expect(one).toBeInstanceOf(UnsentError);
    expect((one as UnsentError).unsent).toBe(2);
    expect(Date.now() - t0).toBeLessThan(3000);
    await lanes.close({ timeoutMillis: 0 }).catch(() => undefined);
  });

  it("close() wakes a push waiting for room with ClientClosedError, as Go's Close and Python's close()", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(() => undefined); // holds every flush, so the buffer stays full
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const b = lanes.queue("q").buffer({ maxSize: 2, messageCount: 2, timeMillis: 60_000 });
    await b.push([1, 2]);
    let outcome = "waiting";
    const waiting = b.push([3]).then(() => (outcome = "enqueued"), (e: unknown) => (outcome = e instanceof ClientClosedError ? "closed" : String(e)));
    await new Promise((r) => setTimeout(r, 100));
    expect(outcome).toBe("waiting");
    const closing = lanes.close({ timeoutMillis: 300 }).catch(() => undefined);
    await waiting;
    expect(outcome).toBe("closed");
    await closing;
  });

  it("after close() gives up, the buffer stops sending until close() or flush() is called again", async () => {
    const s = await new FakeServer().start();
    servers.push(s);
    s.otherwise(reply(503, { error: "down", code: "unavailable" }));
    const lanes = new Lanes({ url: s.url, retryAttempts: 0, env: {}, logger: null });
    const b = lanes.queue("q").buffer({ timeMillis: 60_000, retryDelayMillis: 10 });
    await b.push([1, 2]);
    await expect(lanes.close({ timeoutMillis: 200 })).rejects.toThrow(/2 buffered message/);
    await new Promise((r) => setTimeout(r, 50));
    const seen = s.seen.length;
    await new Promise((r) => setTimeout(r, 200));
    expect(s.seen.length).toBe(seen);
    s.otherwise(broker(1_000_000));
    await lanes.close({ timeoutMillis: 2000 });
    expect(b.size).toBe(0);
  });
});

describe("the beforeExit safety net", () => {
  it("is registered once per client with a buffer and removed by close()", async () => {
    const before = process.listenerCount("beforeExit");
    const lanes = new Lanes({ url: "http://127.0.0.1:2", env: {}, logger: null });
    lanes.queue("a").buffer({});
    lanes.queue("b").buffer({});
    expect(process.listenerCount("beforeExit")).toBe(before + 1);
    await lanes.close();
    expect(process.listenerCount("beforeExit")).toBe(before);
  });
});
