// The all… walks go through the dead letters, messages and queue lists page by page by the
// broker's key, so rows replayed, pushed or deleted between two pages move no row of the rest.
import { describe, expect, it } from "vitest";
import type { Lanes } from "../../src/index.js";
import { client, uniq } from "./helpers.js";

/**
 * walkSpy is a fetch that counts the requests to `path`, sends a malformed `after` on request
 * number `badAfterAt` (a real 400 from the broker) and, to play a broker before keyed paging, drops
 * the answers' nextAfter (`dropKey`) and truncated (`dropTruncated`) fields.
 */
function walkSpy(path: string, o: { badAfterAt?: number; dropKey?: boolean; dropTruncated?: boolean } = {}) {
  const seen = { requests: 0, keyed: 0 };
  const wrapped: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.pathname !== path) return fetch(input, init);
    seen.requests++;
    if (url.searchParams.has("after")) seen.keyed++;
    if (seen.requests === o.badAfterAt) url.searchParams.set("after", "not-a-key");
    const res = await fetch(url, init);
    if (res.status !== 200 || (!o.dropKey && !o.dropTruncated)) return res;
    const body = (await res.json()) as Record<string, unknown>;
    if (o.dropKey) delete body.nextAfter;
    if (o.dropTruncated) {
      delete body.truncated;
      delete body.nextOffset;
    }
    const headers = new Headers(res.headers);
    headers.delete("content-length");
    return new Response(JSON.stringify(body), { status: 200, headers });
  };
  return { spied: client({ fetch: wrapped, retryAttempts: 0 }), seen };
}

/** fileDeadLetters files n dead letters on queue q, one failure each, and returns their data newest first (the listing's order). */
async function fileDeadLetters(lanes: Lanes, q: string, n: number): Promise<string[]> {
  const data = Array.from({ length: n }, (_, i) => `d${i}`);
  await lanes.queue(q).push(data.map((d) => ({ data: d })));
  for (let i = 0; i < n; i++) {
    const [m] = await lanes.queue(q).batch(1).wait(false).pop();
    await lanes.ack(m!, "dlq", { error: "poison" });
  }
  return data.reverse();
}

async function collect<T>(rows: AsyncIterable<T>, key: (row: T) => unknown): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const row of rows) out.push(key(row));
  return out;
}

/** configureQueues creates n queues named `${prefix}-0`… labelled `namespace`, and returns their names. */
async function configureQueues(lanes: Lanes, namespace: string, prefix: string, n: number): Promise<string[]> {
  const names = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  for (const name of names) await lanes.admin.configureQueue(name, {}, { namespace });
  return names;
}

describe("walks", () => {
  it("give every row of a listing longer than a page once, in order, the pages after the first by key", async () => {
    const lanes = client();
    const q = uniq("walk");
    const want = await fileDeadLetters(lanes, q, 7);
    const { spied, seen } = walkSpy("/api/v1/dlq");
    expect(await collect(spied.queue(q).dlq().limit(3).all(), (m) => m.data)).toEqual(want);
    expect(seen).toEqual({ requests: 3, keyed: 2 });
    expect(await collect(spied.admin.allDlq({ queue: q, limit: 2 }), (m) => m.data)).toEqual(want);
    expect(await collect(spied.queue(q).dlq().partition("other").all(), (m) => m.data)).toEqual([]);
    expect(await collect(spied.queue(q).dlq().all(), (m) => m.data)).toEqual(want);
    const one = await lanes.admin.listMessages({ queue: q, limit: 1000 });
    expect(one.messages).toHaveLength(7);
    expect(await collect(lanes.admin.allMessages({ queue: q, limit: 2 }), (m) => m.transactionId)).toEqual(one.messages.map((m) => m.transactionId));
  });

  it("of the dead letters give each that stayed once while rows are replayed and deleted between two pages", async () => {
    const lanes = client();
    const q = uniq("walk-churn");
    const all = await fileDeadLetters(lanes, q, 8);
    const rows = new Map((await lanes.admin.listDlq({ queue: q, limit: 1000 })).messages.map((m) => [String(m.data), m]));
    const gone = rows.get(all[5]!)!;
    const got: unknown[] = [];
    for await (const m of lanes.queue(q).dlq().limit(3).all()) {
      got.push(m.data);
      if (got.length === 3) { // the first page is done: replay it, delete a row of a later page
        for (const d of got) await lanes.admin.replayDlq(rows.get(String(d))!.id);
        await lanes.admin.deleteMessage(gone.partitionId, gone.transactionId);
      }
    }
    expect(got).toEqual([...all.slice(0, 5), ...all.slice(6)]);
  });

  it("of the messages list the messages it started with while more are pushed between two pages", async () => {
    const lanes = client();
    const q = uniq("walk-push");
    for (let i = 0; i < 7; i++) await lanes.queue(q).push([{ data: `m${i}` }]); // seven segments, newest last
    const got: unknown[] = [];
    for await (const m of lanes.admin.allMessages({ queue: q, limit: 3 })) {
      got.push(m.data);
      if (got.length === 3 || got.length === 6) await lanes.queue(q).push([{ data: `late${got.length}` }]);
    }
    expect(got).toEqual(["m6", "m5", "m4", "m3", "m2", "m1", "m0"]);
  });

  it("of the messages continue a page the byte budget cut short after its last message", async () => {
    const lanes = client();
    const q = uniq("walk-budget");
    const big = "x".repeat(1200 * 1024); // counted twice in a message listing: three such pass 4 MiB
    for (let i = 0; i < 4; i++) await lanes.queue(q).push([{ data: big, transactionId: `big${i}` }]);
    const first = await lanes.admin.listMessages({ queue: q, limit: 100 });
    expect(first.messages.length).toBeLessThan(4);
    expect(first.truncated).toBe(true);
    expect(await collect(lanes.admin.allMessages({ queue: q }), (m) => m.transactionId)).toEqual(["big3", "big2", "big1", "big0"]);
  });

  it("of the queue lists give each queue once while queues come and go between two pages", async () => {
    const lanes = client();
    const q = uniq("walk-queues");
    const namespace = `${q}-ns`;
    const names = await configureQueues(lanes, namespace, `${q}-q`, 7);
    try {
      const walks = {
        allQueues: () => lanes.admin.allQueues({ namespace, limit: 3 }),
        allQueueStatus: () => lanes.admin.allQueueStatus({ namespace, limit: 3 }),
      };
      for (const walk of Object.values(walks)) expect(await collect(walk(), (s) => s.name)).toEqual(names);
      for (const [name, walk] of Object.entries(walks)) {
        const want = await collect(walk(), (s) => s.name);
        const got: unknown[] = [];
        for await (const s of walk()) {
          got.push(s.name);
          if (got.length === 3) { // two listed queues go, one sorting before the walk's place comes
            for (const done of got.slice(0, 2)) await lanes.admin.deleteQueue(String(done));
            names.push(...(await configureQueues(lanes, namespace, `${q}-a-${name}`, 1)));
          }
        }
        expect(got).toEqual(want);
      }
    } finally {
      for (const name of names) await lanes.admin.deleteQueue(name).catch(() => undefined);
    }
  });

  it("ask for no further page once the loop is left, and throw a page's error once", async () => {
    const lanes = client();
    const q = uniq("walk-stop");
    const want = await fileDeadLetters(lanes, q, 5);
    const { spied, seen } = walkSpy("/api/v1/dlq");
    for await (const m of spied.queue(q).dlq().limit(2).all()) if (m.data === want[0]) break; // the first row
    for await (const m of spied.queue(q).dlq().limit(2).all()) if (m.data === want[1]) break; // the first page's last row
    expect(seen.requests).toBe(2);

    const failing = walkSpy("/api/v1/dlq", { badAfterAt: 2 });
    const got: unknown[] = [];
    const walk = failing.spied.queue(q).dlq().limit(2).all();
    const err = await (async () => {
      try {
        for await (const m of walk) got.push(m.data);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(got).toEqual(want.slice(0, 2));
    expect(err).toMatchObject({ status: 400 });
    expect(await walk.next()).toEqual({ done: true, value: undefined });
    expect(failing.seen.requests).toBe(2);
  });

  it("stop at their signal's abort between two pages, throwing its reason once, in each walk", async () => {
    const lanes = client();
    const q = uniq("walk-abort");
    await fileDeadLetters(lanes, q, 3);
    const namespace = `${q}-ns`;
    const names = await configureQueues(lanes, namespace, `${q}-q`, 3);
    try {
      type Walk = (spied: Lanes, signal: AbortSignal) => AsyncGenerator<unknown, void, undefined>;
      // Three rows at two a page: each walk has a second page to ask for.
      const walks: [string, string, Walk][] = [
        ["dlq().all", "/api/v1/dlq", (l, signal) => l.queue(q).dlq().limit(2).all({ signal })],
        ["allDlq", "/api/v1/dlq", (l, signal) => l.admin.allDlq({ queue: q, limit: 2 }, { signal })],
        ["allMessages", "/api/v1/messages", (l, signal) => l.admin.allMessages({ queue: q, limit: 2 }, { signal })],
        ["allQueues", "/api/v1/resources/queues", (l, signal) => l.admin.allQueues({ namespace, limit: 2 }, { signal })],
        ["allQueueStatus", "/api/v1/status/queues", (l, signal) => l.admin.allQueueStatus({ namespace, limit: 2 }, { signal })],
      ];
      for (const [name, path, walk] of walks) {
        const { spied, seen } = walkSpy(path);
        const ctl = new AbortController();
        const it = walk(spied, ctl.signal);
        const first = await it.next();
        expect(first.done, name).toBe(false);
        const reason = new Error(`${name} aborted`);
        ctl.abort(reason);
        expect((await it.next()).done, `${name}: the rest of the page in hand`).toBe(false);
        await expect(it.next(), name).rejects.toBe(reason);
        expect(await it.next(), name).toEqual({ done: true, value: undefined });
        expect(seen.requests, `${name}: no page after the abort`).toBe(1);

        const aborted = new AbortController();
        aborted.abort(reason);
        await expect(walk(spied, aborted.signal).next(), `${name}: an aborted signal asks for nothing`).rejects.toBe(reason);
        expect(seen.requests, name).toBe(1);
      }
    } finally {
      for (const name of names) await lanes.admin.deleteQueue(name);
    }
  });

  it("abort a page in flight when their signal aborts", async () => {
    const q = uniq("walk-inflight");
    let started!: () => void;
    const asked = new Promise<void>((r) => (started = r));
    // A broker that never answers the walk's page: only the signal's abort ends the request.
    const hanging: typeof fetch = async (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (url.pathname !== "/api/v1/dlq") return fetch(input, init);
      started();
      return new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason), { once: true }));
    };
    const spied = client({ fetch: hanging, retryAttempts: 0 });
    const ctl = new AbortController();
    const walk = spied.queue(q).dlq().all({ signal: ctl.signal });
    const page = walk.next();
    await asked;
    const reason = new Error("walk aborted");
    ctl.abort(reason);
    const unanswered = new Promise((r) => setTimeout(() => r("still waiting 5 s after the abort"), 5000));
    await expect(Promise.race([page, unanswered])).rejects.toBe(reason);
    expect(await walk.next()).toEqual({ done: true, value: undefined });
  });

  it("follow the offset from a broker that names no key", async () => {
    const lanes = client();
    const q = uniq("walk-old");
    const want = await fileDeadLetters(lanes, q, 7);
    for (const o of [{ dropKey: true }, { dropKey: true, dropTruncated: true }]) {
      const { spied, seen } = walkSpy("/api/v1/dlq", o);
      expect(await collect(spied.queue(q).dlq().limit(3).all(), (m) => m.data)).toEqual(want);
      expect(seen).toEqual({ requests: 3, keyed: 0 });
    }
    const exact = walkSpy("/api/v1/dlq", { dropKey: true, dropTruncated: true });
    expect(await collect(exact.spied.queue(q).dlq().limit(7).all(), (m) => m.data)).toEqual(want);
    expect(exact.seen.requests).toBe(2); // a full last page takes one more, empty, page

    const namespace = `${q}-ns`;
    const names = await configureQueues(lanes, namespace, `${q}-q`, 5);
    try {
      const { spied, seen } = walkSpy("/api/v1/resources/queues", { dropKey: true });
      expect(await collect(spied.admin.allQueues({ namespace, limit: 2 }), (s) => s.name)).toEqual(names);
      expect(seen).toEqual({ requests: 3, keyed: 0 });
    } finally {
      for (const name of names) await lanes.admin.deleteQueue(name);
    }
  });
});
