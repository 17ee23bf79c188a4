// A pop's answer names its lease (leaseSeconds, leaseExpiresAt); the consume loop and the
// iterator count with it instead of assuming 60 s, against a real broker whose fault scripts
// fail the ack calls. The same cases run in sdk-go (leasehint_integration_test.go) and
// sdk-python (test_lease_hint.py).
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import type * as lanes from "../../src/index.js";
import { brokerUrl, client, sleep, uniq } from "./helpers.js";

const runs: string[] = [];
afterEach(async () => {
  for (const run of runs.splice(0)) await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "DELETE" });
});

/** failingAcks scripts the next ack calls' answers and returns a client they apply to, with no retries. */
async function failingAcks(responses: unknown[], o: lanes.LanesOptions = {}): Promise<lanes.Lanes> {
  const run = `js-${randomUUID().slice(0, 12)}`;
  const rules = [{ method: "POST", path: "/api/v1/ack*", responses }];
  const res = await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
  expect(res.status, "the test broker serves no fault scripts: start it with scripts/test-broker.sh (LANES_TEST_FAULTS on)").toBe(204);
  runs.push(run);
  return client({ headers: { "X-Lanes-Test-Run": run }, retryAttempts: 0, max429Attempts: 0, ...o });
}

describe("the lease a pop's answer names", () => {
  it("is in popResult: the queue's leaseTime and its end", async () => {
    const q = uniq("leasehint");
    await client().queue(q).config({ leaseTime: 120 }).create();
    await client().queue(q).push([{ data: 1 }]);
    const r = await client().queue(q).wait(false).popResult();
    expect(r.messages).toHaveLength(1);
    expect(r.leaseSeconds).toBe(120);
    const endsIn = Date.parse(r.leaseExpiresAt ?? "") - Date.now();
    expect(endsIn).toBeGreaterThan(110_000);
    expect(endsIn).toBeLessThan(130_000);
  });

  // Before, the iterator assumed 60 s and resent past the 3 s lease (a third attempt at 3 s,
  // cut only by the 5 s bound on leaving).
  it("bounds the resending of a failed ack without leaseSeconds: attempts at 0 s and 1 s, none past the queue's 3 s lease", async () => {
    const q = uniq("leasehintshort");
    await client().queue(q).config({ leaseTime: 3 }).create();
    const c = await failingAcks([{ status: 503, times: 10 }]);
    await client().queue(q).push([1, 2, 3].map((n) => ({ data: n })));
    const failed: unknown[] = [];
    const start = Date.now();
    const handled: number[] = [];
    for await (const m of c.queue<number>(q).batch(10).limit(3).onError((e) => failed.push(e)).messages()) handled.push(m.data);
    const tookMillis = Date.now() - start;
    expect(handled).toEqual([1, 2, 3]);
    expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([503, 503]);
    expect(tookMillis, "resent past the lease").toBeLessThan(2500);
    const again = await client().queue<number>(q).batch(10).wait(true).timeoutMillis(6000).pop();
    expect(again.map((m) => m.data), "the pop redelivers after its lease").toEqual([1, 2, 3]);
  }, 20_000);

  // Before, the loop took the renewal answer's hour and resent at 3.5 s, 5.5 s, 9.5 s, ..., past the lease.
  it("counts a renewed lease from when the renewal was sent, not from the answer's newExpiresAt (the database's clock)", async () => {
    const q = uniq("leasehintahead");
    await client().queue(q).config({ leaseTime: 3 }).create();
    const c = await failingAcks([{ status: 503, times: 20 }], { fetch: aheadRenewals });
    await client().queue(q).push([{ data: 1 }]);
    const failed: unknown[] = [];
    let handledAt = 0;
    // The 3 s lease is renewed every second for 2 s while the handler holds its message 2.5 s;
    // the ack fails, and the next attempt, 1 s later, would come within 1 s of the renewed
    // lease's end (about 4 s): the loop gives up after one attempt.
    const consumer = c
      .queue(q)
      .batch(1)
      .limit(1)
      .onError((e) => failed.push(e))
      .consume(async () => {
        await sleep(2500);
        handledAt = Date.now();
      });
    try {
      const ended = await Promise.race([consumer.closed.then(() => true), sleep(8000).then(() => false)]);
      expect(ended, "still resending the ack long after the handler").toBe(true);
      expect(Date.now() - handledAt, "resent past the lease").toBeLessThan(1500);
      expect(failed.map((e) => (e as lanes.APIError).status)).toEqual([503]);
    } finally {
      await consumer.stopAndCancel();
    }
    const again = await client().queue<number>(q).batch(10).wait(true).timeoutMillis(6000).pop();
    expect(again.map((m) => m.data), "the pop redelivers after its lease").toEqual([1]);
  }, 30_000);
});

/** aheadRenewals is fetch answering each applied lease renewal with a newExpiresAt an hour ahead, as a broker whose database clock ran an hour ahead of the client's would; the renewal itself reaches the broker unchanged. */
const aheadRenewals: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  const url = input instanceof Request ? input.url : String(input);
  if (!url.endsWith("/extend") || res.status !== 200) return res;
  const answer = (await res.json()) as Record<string, unknown>;
  if (answer.newExpiresAt) {
    const ahead = new Date(Date.now() + 3_600_000).toISOString();
    Object.assign(answer, { newExpiresAt: ahead, expiresAt: ahead, lease_expires_at: ahead });
  }
  return new Response(JSON.stringify(answer), { status: 200, headers: { "content-type": "application/json" } });
};
