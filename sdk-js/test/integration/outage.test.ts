// A handler that fails only for want of a broker spends no retry of its message (docs/consuming.md §3 step 5).
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { APIConnectionError, APIError, BadRequestError, InternalServerError, Lanes, RateLimitError } from "../../src/index.js";
import { brokerUrl, client, closedPortUrl, sleep, uniq } from "./helpers.js";

/** connectionRefused is the SDK's own error of a call to a broker that is down: a push through a second client to a closed port. */
async function connectionRefused(): Promise<unknown> {
  const down = new Lanes({ url: await closedPortUrl(), env: {}, retryAttempts: 0 });
  try {
    await down.queue("orders-out").push([{ data: 1 }]);
  } catch (err) {
    expect(err).toBeInstanceOf(APIConnectionError);
    return err;
  } finally {
    await down.close();
  }
  throw new Error("the push to a closed port succeeded");
}

const apiError = (status: number, code: string) => {
  const init = { status, code, message: code, body: { error: code, code } };
  if (status === 429) return new RateLimitError({ ...init, retryAfter: 300 });
  if (status >= 500) return new InternalServerError(init);
  if (status === 400) return new BadRequestError(init);
  return new APIError(init);
};

describe("a handler failing for want of a broker", () => {
  it.each([
    { name: "connection refused", failure: connectionRefused, redelivered: true },
    { name: "connection refused, wrapped as a cause", failure: async () => new Error("commit order", { cause: await connectionRefused() }), redelivered: true },
    { name: "503", failure: async () => apiError(503, "database_unavailable"), redelivered: true },
    { name: "502", failure: async () => apiError(502, "bad_gateway"), redelivered: true },
    { name: "504", failure: async () => apiError(504, "gateway_timeout"), redelivered: true },
    { name: "429", failure: async () => apiError(429, "rate_limited"), redelivered: true },
    { name: "500", failure: async () => apiError(500, "internal"), redelivered: false },
    { name: "400", failure: async () => apiError(400, "bad_request"), redelivered: false },
  ])("$name: redelivered without spending a retry: $redelivered", async ({ failure, redelivered }) => {
    const lanes = client();
    const q = uniq("outage");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: "order" }]);
    let calls = 0;
    await lanes
      .queue(q)
      .wait(false)
      .idleMillis(2500)
      .consume(async () => {
        calls += 1;
        if (calls === 1) throw await failure();
      });
    const page = await lanes.queue(q).dlq().limit(10).get();
    if (redelivered) {
      expect(calls).toBe(2);
      expect(page.messages).toEqual([]);
    } else {
      expect(calls).toBe(1);
      expect(page.messages.map((d) => d.data)).toEqual(["order"]);
    }
    await lanes.close();
  });

  it("a batch handler's slice is released with `retry` too", async () => {
    const lanes = client();
    const q = uniq("outage-batch");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: 1 }, { data: 2 }]);
    let calls = 0;
    let handled = 0;
    await lanes
      .queue(q)
      .wait(false)
      .batch(10)
      .idleMillis(2500)
      .consumeBatch(async (ms) => {
        calls += 1;
        if (calls === 1) throw apiError(503, "database_unavailable");
        handled += ms.length;
      });
    expect(handled).toBe(2);
    expect((await lanes.queue(q).dlq().limit(10).get()).messages).toEqual([]);
    await lanes.close();
  });

  it("does not spin: the worker waits the backoff of a failed pop (1 s, 2 s, …) before popping again, and a stop cuts the wait short", async () => {
    const lanes = client();
    const down = new Lanes({ url: await closedPortUrl(), env: {}, retryAttempts: 0 });
    const q = uniq("outage-paced");
    await lanes.queue(q).push([{ data: "order" }]);
    let calls = 0;
    const c = lanes
      .queue(q)
      .timeoutMillis(1000)
      .consume(async () => {
        calls += 1;
        await down.queue("orders-out").push([{ data: 1 }]);
      });
    await sleep(2500);
    // handled at 0 s, again after 1 s, next after 2 s more (3 s): two calls, not hundreds
    expect(calls).toBe(2);
    const started = Date.now();
    await c.stop({ timeoutMillis: 5000 });
    expect(Date.now() - started).toBeLessThan(500);
    expect((await lanes.queue(q).dlq().limit(10).get()).messages).toEqual([]);
    await down.close();
    await lanes.close();
  });

  it("a 429's Retry-After longer than the backoff is waited out before popping again (the broker asked for 3 s; the backoff is 1 s)", async () => {
    const base = brokerUrl();
    const run = `js-${randomUUID().slice(0, 12)}`;
    const rules = [{ method: "POST", path: "/api/v1/push", responses: [{ status: 429, headers: { "Retry-After": "3" } }] }];
    const res = await fetch(`${base}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
    expect(res.status, "the test broker serves no fault scripts (LANES_TEST_FAULTS)").toBe(204);
    const lanes = client();
    const scripted = client({ headers: { "X-Lanes-Test-Run": run }, max429Attempts: 0 });
    const q = uniq("outage-retry-after");
    try {
      await lanes.queue(q).push([{ data: "order" }]);
      const calls: number[] = [];
      const c = lanes
        .queue(q)
        .timeoutMillis(1000)
        .consume(async () => {
          calls.push(Date.now());
          await scripted.queue(uniq("orders-out")).push([{ data: 1 }]); // the first push is answered 429, Retry-After: 3
        });
      const t0 = Date.now();
      while (calls.length < 2 && Date.now() - t0 < 6000) await sleep(50);
      await c.stop({ timeoutMillis: 5000 });
      expect(calls).toHaveLength(2);
      expect(calls[1]! - calls[0]!).toBeGreaterThanOrEqual(2900);
      expect(calls[1]! - calls[0]!).toBeLessThan(4500);
      expect((await lanes.queue(q).dlq().limit(10).get()).messages).toEqual([]);
    } finally {
      await fetch(`${base}/__test/faults/${run}`, { method: "DELETE" });
      await lanes.close();
      await scripted.close();
    }
  });
});
