// Producing, popping, acking and renewing against the real broker.
import { describe, expect, it } from "vitest";
import { AckError, type Message } from "../../src/index.js";
import { brokerUrl, client, expectUuidV7, uniq } from "./helpers.js";

describe("broker", () => {
  it("LANES_TEST_URL answers /health", async () => {
    brokerUrl();
    const h = await client().health();
    expect(h.status).toBe("healthy");
  });
});

describe("push and pop", () => {
  it("push returns per-item results, mints UUIDv7 ids, and dedups a repeated id", async () => {
    const lanes = client();
    const q = uniq("push");
    const res = await lanes.queue(q).partition("customer-42").push([{ data: { orderId: 1 } }, { transactionId: "order-2", data: { orderId: 2 } }, "bare"]);
    expect(res.map((r) => r.status)).toEqual(["queued", "queued", "queued"]);
    expectUuidV7(res[0]!.transactionId);
    expect(res[1]!.transactionId).toBe("order-2");
    expect(res[0]!.queue).toBe(q);
    const again = await lanes.queue(q).partition("customer-42").push([{ transactionId: "order-2", data: { orderId: 2 } }]);
    expect(again[0]!.status).toBe("duplicate");
    expect(again[0]!.messageId).toBe(res[1]!.messageId);
    expect(await lanes.queue(q).push([])).toEqual([]);
  });

  it("pop returns [] on an empty queue (204 never parsed) and messages in order", async () => {
    const lanes = client();
    const q = uniq("pop");
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
    await lanes.queue(q).push([1, 2, 3].map((n) => ({ data: { n } })));
    const r = await lanes.queue<{ n: number }>(q).batch(10).wait(false).popResult();
    expect(r.messages.map((m) => m.data.n)).toEqual([1, 2, 3]);
    expect(r.leaseId).not.toBe("");
    expect(r.messages[0]!.queue).toBe(q);
    const acks = await lanes.ack(r.messages, "completed");
    expect(acks.every((a) => a.success)).toBe(true);
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
  });

  it("autopilot off restores batch 1", async () => {
    const lanes = client({ popAutopilot: false });
    const q = uniq("apoff");
    await lanes.queue(q).push([1, 2, 3]);
    const one = await lanes.queue(q).wait(false).pop();
    expect(one).toHaveLength(1);
    const on = await lanes.queue(q).autopilot(true).wait(false).leaseSeconds(30).pop();
    expect(on.length).toBeGreaterThanOrEqual(0); // the first batch is still leased; autopilot=true is accepted
  });

  it("a long-poll pop is woken by a push", async () => {
    const lanes = client();
    const q = uniq("wait");
    const popping = lanes.queue(q).timeoutMillis(10_000).pop();
    await new Promise((r) => setTimeout(r, 300));
    const t0 = Date.now();
    await lanes.queue(q).push([{ data: "wake" }]);
    const msgs = await popping;
    expect(msgs.map((m) => m.data)).toEqual(["wake"]);
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  it("partition route, groups and subscription mode all", async () => {
    const lanes = client();
    const q = uniq("groups");
    await lanes.queue(q).partition("p1").push([{ data: "x" }, { data: "y" }]);
    const a = await lanes.queue(q).partition("p1").group("audit").subscriptionMode("all").batch(5).wait(false).pop();
    const b = await lanes.queue(q).partition("p1").group("billing").subscriptionMode("all").batch(5).wait(false).pop();
    expect(a.map((m) => m.data)).toEqual(["x", "y"]);
    expect(b.map((m) => m.data)).toEqual(["x", "y"]);
    expect(a[0]!.consumerGroup).toBe("audit");
    await lanes.ack(a, "completed");
    // a new group with the default mode skips the backlog
    expect(await lanes.queue(q).group("late").wait(false).pop()).toEqual([]);
  });

  it("nack failed redelivers; an ack that is not applied throws AckError with the results", async () => {
    const lanes = client();
    const q = uniq("nack");
    await lanes.queue(q).push([{ data: 1 }]);
    const [m] = await lanes.queue(q).wait(false).pop();
    const r = await lanes.ack(m!, "failed", { error: "nope" });
    expect(r.success).toBe(true);
    const [again] = await lanes.queue(q).wait(false).pop();
    expect(again!.transactionId).toBe(m!.transactionId);
    await lanes.ack(again!, "completed");
    const err = await lanes.ack({ ...again!, transactionId: "never-pushed" }, "failed").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AckError);
    expect((err as AckError).results).toHaveLength(1);
    await expect(lanes.ack(again!, "weird" as never)).rejects.toThrow(/unknown status/);
  });

  it("renew extends a lease once per distinct lease id", async () => {
    const lanes = client();
    const q = uniq("renew");
    await lanes.queue(q).push([1, 2]);
    const msgs: Message[] = await lanes.queue(q).batch(2).wait(false).pop();
    const res = await lanes.renew(msgs, { seconds: 120 });
    expect(res).toHaveLength(1);
    expect(res[0]).toMatchObject({ leaseId: msgs[0]!.leaseId, success: true, renewed: 1 });
    expect(res[0]!.newExpiresAt).toBeTruthy();
    const gone = await lanes.renew("00000000-0000-0000-0000-000000000000");
    expect(gone[0]!.success).toBe(false);
  });

  it("renew with seconds 0 or below extends to the broker's default 60 s, as Go does, not to 1 s", async () => {
    const lanes = client();
    const q = uniq("renew-neg");
    await lanes.queue(q).push([1]);
    const msgs: Message[] = await lanes.queue(q).leaseSeconds(5).wait(false).pop();
    const before = Date.now();
    const [res] = await lanes.renew(msgs, { seconds: -5 });
    expect(res!.success).toBe(true);
    expect(new Date(res!.newExpiresAt!).getTime() - before).toBeGreaterThan(50_000);
    await lanes.ack(msgs, "completed");
  });

  it("every request names the SDK as its User-Agent, as Go and Python do, unless `headers` name another", async () => {
    for (const [headers, want] of [
      [undefined, "lanes-mq-js/0.0.0"],
      [{ "User-Agent": "billing/2.1" }, "billing/2.1"],
    ] as const) {
      const agents: (string | null)[] = [];
      const recording: typeof fetch = (input, init) => {
        agents.push(new Headers(init?.headers).get("user-agent"));
        return fetch(input, init);
      };
      const lanes = client({ fetch: recording, headers });
      await lanes.queue(uniq("agent")).push([1]);
      await lanes.health();
      expect(agents).toEqual([want, want]);
    }
  });

  it("a header in two letter cases, or also set by the SDK, goes out once, as Go and Python send it", async () => {
    // fetch joined every spelling into one value: "Bearer the-callers, Bearer the-token".
    const headers = {
      Accept: "text/plain",
      accept: "application/json",
      "CONTENT-TYPE": "application/json; charset=utf-8",
      "user-agent": "billing/2.1",
      AUTHORIZATION: "Bearer the-callers",
      "x-retry-count": "9",
      "X-Team": "a",
      "x-team": "b",
    };
    const want = {
      accept: "application/json",
      "content-type": "application/json; charset=utf-8",
      "user-agent": "billing/2.1",
      authorization: "Bearer the-token",
      "x-retry-count": "0",
      "x-team": "b",
    };
    const sent: Record<string, string | null>[] = [];
    const recording: typeof fetch = (input, init) => {
      const h = new Headers(init?.headers);
      sent.push(Object.fromEntries(Object.keys(want).map((k) => [k, h.get(k)])));
      return fetch(input, init);
    };
    const lanes = client({ fetch: recording, headers, bearerToken: "the-token" });
    await lanes.queue(uniq("headers")).push([1]);
    await lanes.health();
    expect(sent).toEqual([want, want]);
  });

  it("configure and GET queue", async () => {
    const lanes = client();
    const q = uniq("cfg");
    const res = await lanes.queue(q).config({ leaseTime: 120, retryLimit: 5 }).create();
    expect(res.options.leaseTime).toBe(120);
    const merged = await lanes.admin.configureQueue(q, { retryLimit: 7 }, { mode: "merge" });
    expect(merged.options).toMatchObject({ leaseTime: 120, retryLimit: 7 });
    const detail = await lanes.admin.getQueue(q);
    expect(detail.options?.retryLimit).toBe(7);
  });

  it("the push buffer flushes on count and on close()", async () => {
    const lanes = client();
    const q = uniq("buffer");
    const buf = lanes.queue(q).buffer({ messageCount: 3, timeMillis: 60_000 });
    for (let i = 0; i < 4; i++) await buf.push([{ data: i }]);
    await new Promise((r) => setTimeout(r, 300));
    expect(buf.size).toBe(1); // three flushed on count, one waiting on time
    await lanes.close();
    const got = await lanes.queue<number>(q).batch(10).wait(false).pop();
    expect(got.map((m) => m.data)).toEqual([0, 1, 2, 3]);
  });

  it("a buffer sized 0 or below takes the defaults, as Go's zero BufferOptions and Python do (a count of 0 once sent every item alone)", async () => {
    const lanes = client();
    const q = uniq("zero-sized");
    const buf = lanes.queue<number>(q).buffer({ messageCount: 0, timeMillis: 3_600_000, maxSize: -1, retryDelayMillis: 0 });
    await buf.push([1, 2, 3]);
    await new Promise((r) => setTimeout(r, 200));
    expect(lanes.bufferStats()).toEqual({ activeBuffers: 1, totalBufferedMessages: 3, flushesPerformed: 0 });
    await lanes.flushAll();
    expect(lanes.bufferStats()).toEqual({ activeBuffers: 1, totalBufferedMessages: 0, flushesPerformed: 1 });
    expect((await lanes.queue<number>(q).batch(10).wait(false).pop()).map((m) => m.data)).toEqual([1, 2, 3]);
    await lanes.close();
  });

  it("bufferStats counts the buffers, the items waiting in them and the batches sent (as Go's BufferStats and Python's buffer_stats())", async () => {
    const lanes = client();
    const q = uniq("stats");
    expect(lanes.bufferStats()).toEqual({ activeBuffers: 0, totalBufferedMessages: 0, flushesPerformed: 0 });
    await lanes.queue(q).partition("a").buffer({ timeMillis: 3_600_000 }).push([1, 2, 3]);
    await lanes.queue(q).partition("b").buffer({ timeMillis: 3_600_000 }).push([4, 5]);
    expect(lanes.bufferStats()).toEqual({ activeBuffers: 2, totalBufferedMessages: 5, flushesPerformed: 0 });
    // A buffer is shared per (queue, partition) inside one client.
    expect(lanes.queue(q).partition("a").buffer({ messageCount: 7 }).size).toBe(3);
    expect(lanes.bufferStats()).toEqual({ activeBuffers: 2, totalBufferedMessages: 5, flushesPerformed: 0 });
    await lanes.flushAll();
    expect(lanes.bufferStats()).toEqual({ activeBuffers: 2, totalBufferedMessages: 0, flushesPerformed: 2 });
    const stored: number[] = [];
    for (let i = 0; i < 2; i++) stored.push(...(await lanes.queue<number>(q).autopilot(false).batch(10).wait(false).pop()).map((m) => m.data)); // a pop claims one partition
    expect(stored.sort()).toEqual([1, 2, 3, 4, 5]);
    await lanes.close();
  });
});
