// The consume loop and the iterator ack a pop with the smallest list that moves the cursor the
// same way (docs/sdk-design.md, "Loop acks"), against the real broker. The same cases run in
// sdk-go (loopacks_integration_test.go) and sdk-python (test_loop_acks.py).
import { describe, expect, it } from "vitest";
import type * as lanes from "../../src/index.js";
import { client, uniq } from "./helpers.js";

type WireAck = { transactionId: string; status: string };

/** recording is a client whose ack calls' items are recorded in `calls`, read off the wire by a fetch wrapper. */
function recording(): { c: lanes.Lanes; calls: WireAck[][] } {
  const calls: WireAck[][] = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (init?.method === "POST" && url.pathname.startsWith("/api/v1/ack") && typeof init.body === "string") {
      const body = JSON.parse(init.body) as WireAck & { acknowledgments?: WireAck[] };
      const items = url.pathname === "/api/v1/ack" ? [body] : (body.acknowledgments ?? []);
      calls.push(items.map((i) => ({ transactionId: i.transactionId, status: i.status })));
    }
    return fetch(input, init);
  };
  return { c: client({ fetch: recordingFetch }), calls };
}

async function pushIds(q: string, partition: string, ids: string[]): Promise<void> {
  for (const id of ids) await client().queue(q).partition(partition).push([{ data: id, transactionId: id }]);
}

/** expectAllCommitted: the queue-mode cursor of every partition is at its last message. */
async function expectAllCommitted(q: string): Promise<void> {
  expect((await client().queue(q).depth()).pending, "messages the cursor has not passed").toBe(0);
}

const ids = (prefix: string, from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `${prefix}-${from + i}`);

describe("loop acks", () => {
  it("ack a completed partition with its last message", async () => {
    const { c, calls } = recording();
    const q = uniq("loopacks-all");
    await pushIds(q, "a", ids("all", 0, 9));
    const handled: string[] = [];
    await c.queue<string>(q).wait(false).batch(10).limit(10).consume((m) => void handled.push(m.transactionId));
    expect(handled).toEqual(ids("all", 0, 9));
    await expectAllCommitted(q);
    expect(calls).toEqual([[{ transactionId: "all-9", status: "completed" }]]);
  });

  it("send a failure with the last completed message before it, and the failure redelivers first", async () => {
    const { c, calls } = recording();
    const q = uniq("loopacks-mid");
    await pushIds(q, "a", ids("mid", 0, 5));
    const handled: string[] = [];
    let failed = false;
    await c
      .queue<string>(q)
      .wait(false)
      .batch(10)
      .limit(7)
      .onError(() => {})
      .consume((m) => {
        handled.push(m.transactionId);
        if (m.transactionId === "mid-2" && !failed) {
          failed = true;
          throw new Error("boom");
        }
      });
    expect(handled).toEqual([...ids("mid", 0, 2), ...ids("mid", 2, 5)]);
    await expectAllCommitted(q);
    expect(calls).toEqual([
      [
        { transactionId: "mid-1", status: "completed" },
        { transactionId: "mid-2", status: "failed" },
      ],
      [{ transactionId: "mid-5", status: "completed" }],
    ]);
  });

  it("ack each partition the iterator handled with its last message", async () => {
    const { c, calls } = recording();
    const q = uniq("loopacks-iter");
    await pushIds(q, "a", ids("ita", 0, 3));
    await pushIds(q, "b", ids("itb", 0, 2));
    let n = 0;
    for await (const m of c.queue<string>(q).wait(false).batch(10).partitions(2).limit(7).messages()) if (m) n++;
    expect(n).toBe(7);
    await expectAllCommitted(q);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toEqual(
      expect.arrayContaining([
        { transactionId: "ita-3", status: "completed" },
        { transactionId: "itb-2", status: "completed" },
      ]),
    );
    expect(calls[0]).toHaveLength(2);
  });

  it("send a partition that repeats a transaction id whole, so both copies commit", async () => {
    const { c, calls } = recording();
    const q = uniq("loopacks-dup");
    await client().admin.configureQueue(q, { dedupWindowSeconds: 0 }, { mode: "merge" });
    await pushIds(q, "a", ["x", "y", "x"]);
    let n = 0;
    await c.queue<string>(q).wait(false).batch(10).limit(3).consume(() => void n++);
    expect(n).toBe(3);
    await expectAllCommitted(q);
    expect(calls).toEqual([["x", "y", "x"].map((transactionId) => ({ transactionId, status: "completed" }))]);
  });

  it("leave ack() as it is: it sends every message it is given", async () => {
    const { c, calls } = recording();
    const q = uniq("loopacks-manual");
    await pushIds(q, "a", ids("man", 0, 2));
    const ms = await c.queue(q).wait(false).batch(10).pop();
    await c.ack(ms, "completed");
    expect(calls.map((items) => items.length)).toEqual([3]);
  });
});
