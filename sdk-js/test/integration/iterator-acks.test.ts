// The iterator resends a failed ack while the pop's lease lasts, as the consume loop does
// (docs/consuming.md §4), against a real broker whose fault scripts fail the ack calls
// (scripts/test-broker.sh serves them when auth is off). The same cases run in sdk-go
// (iterator_integration_test.go) and sdk-python (test_iterator_acks.py).
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import type * as lanes from "../../src/index.js";
import { brokerUrl, client, uniq } from "./helpers.js";

const runs: string[] = [];
afterEach(async () => {
  for (const run of runs.splice(0)) await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "DELETE" });
});

/** failingAcks scripts the next ack calls' answers and returns a client they apply to, with no retries. */
async function failingAcks(responses: unknown[]): Promise<lanes.Lanes> {
  const run = `js-${randomUUID().slice(0, 12)}`;
  const rules = [{ method: "POST", path: "/api/v1/ack*", responses }];
  const res = await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
  expect(res.status, "the test broker serves no fault scripts: start it with scripts/test-broker.sh (LANES_TEST_FAULTS on)").toBe(204);
  runs.push(run);
  return client({ headers: { "X-Lanes-Test-Run": run }, retryAttempts: 0, max429Attempts: 0 });
}

/** iterate ranges over the builder's messages until the iteration ends on its own, returning the data handed over and how long it took. */
async function iterate(q: lanes.QueueBuilder<number>, signal?: AbortSignal): Promise<{ handled: number[]; tookMillis: number }> {
  const start = Date.now();
  const handled: number[] = [];
  for await (const m of q.messages({ signal })) handled.push(m.data);
  return { handled, tookMillis: Date.now() - start };
}

describe("messages(): a failed ack", () => {
  // Before, the iterator sent the acks once and all three messages came back after the lease.
  it("is resent after the loop's backoff (1 s, 2 s) until it lands, so nothing redelivers", async () => {
    const c = await failingAcks([{ status: 503, times: 2 }, { pass: true }]);
    const q = uniq("iterresend");
    await client().queue(q).push([1, 2, 3].map((n) => ({ data: n })));
    const failed: unknown[] = [];
    const { handled, tookMillis } = await iterate(c.queue<number>(q).leaseSeconds(6).batch(10).limit(3).onError((e) => failed.push(e)));
    expect(handled).toEqual([1, 2, 3]);
    const again = await client().queue(q).batch(10).wait(true).timeoutMillis(8000).pop();
    expect(again, "redelivered: the failed ack was not resent until it landed").toEqual([]);
    expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([503, 503]);
    expect(tookMillis).toBeGreaterThanOrEqual(3000);
  }, 20_000);

  it("answered 429 is resent after its hint, and the 429 is left out of the backoff's count", async () => {
    const c = await failingAcks([{ status: 429, headers: { "retry-after-ms": "300" }, times: 2 }, { status: 503 }, { pass: true }]);
    const q = uniq("iterhint");
    await client().queue(q).push([1, 2, 3].map((n) => ({ data: n })));
    const failed: unknown[] = [];
    const { handled, tookMillis } = await iterate(c.queue<number>(q).leaseSeconds(4).batch(10).limit(3).onError((e) => failed.push(e)));
    expect(handled).toEqual([1, 2, 3]);
    expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([429, 429, 503]);
    // 300 ms, 300 ms, then 1 s after the 503 (4 s had the two 429s counted)
    expect(tookMillis).toBeGreaterThanOrEqual(1500);
    expect(tookMillis).toBeLessThan(3000);
    const again = await client().queue(q).batch(10).wait(true).timeoutMillis(5000).pop();
    expect(again, "redelivered: the failed ack was not resent until it landed").toEqual([]);
  }, 20_000);

  it("is not resent when the next attempt would come within 1 s of the lease's expiry; the pop redelivers", async () => {
    const c = await failingAcks([{ status: 503, times: 10 }]);
    const q = uniq("iterlease");
    await client().queue(q).push([1, 2, 3].map((n) => ({ data: n })));
    const failed: unknown[] = [];
    const { handled, tookMillis } = await iterate(c.queue<number>(q).leaseSeconds(3).batch(10).limit(3).onError((e) => failed.push(e)));
    expect(handled).toEqual([1, 2, 3]);
    // attempts at 0 s and 1 s; the next would be at 3 s, when the lease ends
    expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([503, 503]);
    expect(tookMillis).toBeLessThan(2500);
    const again = await client().queue<number>(q).batch(10).wait(true).timeoutMillis(6000).pop();
    expect(again.map((m) => m.data)).toEqual([1, 2, 3]);
  }, 20_000);

  // Before, leaving waited 15 s of the 30 s lease (attempts at 0, 1, 3, 7 and 15 s).
  for (const how of ["break", "limit"] as const) {
    it(`is resent for at most 5 s after leaving the loop (${how}), not for the rest of the lease`, async () => {
      const c = await failingAcks([{ status: 503, times: 20 }]);
      const q = uniq(`iterleave${how}`);
      await client().queue(q).push([1, 2, 3].map((n) => ({ data: n })));
      const failed: unknown[] = [];
      let builder = c.queue<number>(q).leaseSeconds(30).batch(10).onError((e) => failed.push(e));
      if (how === "limit") builder = builder.limit(3);
      const start = Date.now();
      for await (const m of builder.messages()) {
        expect(m.data).toBeTypeOf("number");
        if (how === "break") break;
      }
      // attempts at 0 s, 1 s and 3 s; the next (7 s) would start past the leave's 5 s
      expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([503, 503, 503]);
      expect(Date.now() - start, "resent past the leave's 5 s").toBeLessThan(5000);
    }, 30_000);
  }

  it("is not resent once the iteration's signal is aborted, as a hard stop ends the loop's resending", async () => {
    const c = await failingAcks([{ status: 503, times: 10 }]);
    const q = uniq("iterabort");
    await client().queue(q).push([1, 2].map((n) => ({ data: n })));
    const stop = new AbortController();
    const failed: unknown[] = [];
    const { handled, tookMillis } = await iterate(
      c.queue<number>(q).leaseSeconds(30).batch(10).limit(2).onError((e) => {
        failed.push(e);
        setTimeout(() => stop.abort(), 200);
      }),
      stop.signal,
    );
    expect(handled).toEqual([1, 2]);
    expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([503]);
    expect(tookMillis, "the abort ended the 1 s wait for the resend").toBeLessThan(800);
  }, 20_000);
});
