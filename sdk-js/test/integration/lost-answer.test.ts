// A write whose answer is lost after the broker committed it (docs/retries.md §5), through a
// small in-test proxy in front of the real broker: incr, putIfAbsent and a KV-only transaction
// are not resent and fail with OutcomeUnknownError; a plain put and a bundle with a push are; a
// resent timer schedule fires once.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Lanes, OutcomeUnknownError, TransactionError } from "../../src/index.js";
import { brokerUrl, client, sleep, uniq } from "./helpers.js";

/** AnswerDropper forwards to the broker; for the next `drops` requests it waits for the whole answer (the write committed), then closes the client's connection without a byte. */
class AnswerDropper {
  drops = 0;
  seen = 0;
  url = "";
  private readonly server: Server;

  constructor(broker: string) {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host" && k !== "connection") headers[k] = v;
        const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
        void fetch(`${broker}${req.url ?? "/"}`, { method: req.method ?? "GET", headers, body: body ?? null }).then(async (answer) => {
          const text = await answer.text();
          this.seen += 1;
          if (this.drops > 0) {
            this.drops -= 1;
            req.socket.destroy();
            return;
          }
          res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "application/json" });
          res.end(text);
        });
      });
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  dropNext(n: number): void {
    this.drops = n;
    this.seen = 0;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

describe("a lost answer on a write", () => {
  const proxy = new AnswerDropper(brokerUrl());
  let viaProxy: Lanes;
  beforeAll(async () => {
    await proxy.start();
    viaProxy = new Lanes({ url: proxy.url, env: {}, retryDelayMillis: 1 });
  });
  afterAll(() => proxy.close());

  it("is not resent when the write is not idempotent, and is when it is", async () => {
    const ns = uniq("lost");
    const direct = client().kv(ns);
    const kv = viaProxy.kv(ns);

    proxy.dropNext(1);
    const incr = await kv.incr("counter", 1, { forever: true }).catch((e: unknown) => e);
    expect(incr).toBeInstanceOf(OutcomeUnknownError);
    expect(proxy.seen).toBe(1);
    expect((await direct.get("counter")).value).toBe(1);

    proxy.dropNext(1);
    await expect(kv.putIfAbsent("once", "first", { forever: true })).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect((await direct.get("once")).value).toBe("first");

    proxy.dropNext(1);
    const tx = viaProxy.transaction();
    tx.kv.incr(ns, "tx-counter", 1, { forever: true });
    await expect(tx.commit()).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect((await direct.get("tx-counter")).value).toBe(1);

    // Idempotent: a plain put is resent and answers.
    proxy.dropNext(1);
    await kv.put("plain", "v", { forever: true });
    expect(proxy.seen).toBe(2);
    expect((await direct.get("plain")).value).toBe("v");

    // A push's ids make the resend of a committed bundle roll back as duplicate.
    proxy.dropNext(1);
    const bundle = viaProxy.transaction().queue(uniq("q")).push([1]);
    bundle.kv.incr(ns, "bundle-counter", 1, { forever: true });
    const err = await bundle.commit().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransactionError);
    expect(err).toMatchObject({ reason: "duplicate", attempts: 2 });
    expect((await direct.get("bundle-counter")).value).toBe(1);
  });
});

describe("a lost answer on a timer schedule", () => {
  const proxy = new AnswerDropper(brokerUrl());
  // The resend waits longer than a firing cycle (250 ms), so the first schedule has fired by then.
  let viaProxy: Lanes;
  beforeAll(async () => {
    await proxy.start();
    viaProxy = new Lanes({ url: proxy.url, env: {}, retryDelayMillis: 1000 });
  });
  afterAll(() => proxy.close());

  /** firedMessages waits until timer `key` of `queue` is gone (every firing done), then pops what it pushed. */
  async function firedMessages(queue: string, key: string): Promise<string[]> {
    const lanes = client();
    for (let i = 0; i < 50 && (await lanes.timers(queue).get(key)).found; i++) await sleep(100);
    await sleep(300);
    return (await lanes.queue(queue).batch(10).wait(false).pop()).map((m) => m.transactionId);
  }

  it("fires once when scheduled directly", async () => {
    const q = uniq("timer-lost");
    proxy.dropNext(1);
    const res = await viaProxy.timers(q).schedule("k", { delayMillis: 0, payload: { a: 1 } });
    expect(proxy.seen).toBe(2);
    expect(await firedMessages(q, "k")).toEqual([res.txn]);
  });

  it("fires once when scheduled as a transaction rider", async () => {
    const q = uniq("txtimer-lost");
    proxy.dropNext(1);
    await viaProxy.transaction().timer(q, "k", { delayMillis: 0, payload: { a: 1 } }).commit();
    expect(proxy.seen).toBe(2);
    expect(await firedMessages(q, "k")).toHaveLength(1);
  });
});
