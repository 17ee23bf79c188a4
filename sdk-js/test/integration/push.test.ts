// Push item encoding and the push buffer's lifecycle against a real broker: what an item may
// be, what the buffer does with items the broker refuses, and what close() promises.
import { describe, expect, it } from "vitest";
import { ClientClosedError, InvalidItemError, Lanes, UnsentError } from "../../src/index.js";
import { client, uniq } from "./helpers.js";

const popAll = async (lanes: Lanes, q: string) => (await lanes.queue(q).autopilot(false).batch(50).wait(false).pop()).map((m) => m.data);

describe("push items", () => {
  it("an object is an envelope only when data/payload and the two ids are its only keys; anything else is stored whole", async () => {
    const lanes = client();
    const q = uniq("envelope");
    const event = { type: "order.created", id: "evt-1", data: { orderId: 9137 } };
    await lanes.queue(q).push([event, { data: { orderId: 1 }, transactionId: "t-1" }, { payload: 2 }]);
    expect(await popAll(lanes, q)).toEqual([event, { orderId: 1 }, 2]);
  });

  it("a transactionId that is not a string is refused, never replaced by a fresh id", async () => {
    const lanes = client();
    const q = uniq("txid");
    const item = { transactionId: 9137 as unknown as string, data: { orderId: 9137 } };
    const err = await lanes.queue(q).push([{ data: 0 }, item]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidItemError);
    expect((err as InvalidItemError).index).toBe(1);
    await expect(lanes.queue(q).buffer().push([item])).rejects.toBeInstanceOf(InvalidItemError);
    await expect(lanes.queue(q).push([{ data: 1, payload: 2 }])).rejects.toThrow(/both data and payload/);
    expect(await popAll(lanes, q)).toEqual([]);
  });

  it("undefined, null and an empty id are absent: a UUIDv7 is minted (as Python's None and \"\")", async () => {
    const lanes = client();
    const q = uniq("absent-ids");
    const res = await lanes.queue(q).push([{ data: 1, transactionId: "" }, { data: 2, transactionId: null as unknown as string }, { data: 3, transactionId: undefined, traceId: "" }]);
    expect(res.map((r) => r.transactionId[14])).toEqual(["7", "7", "7"]);
    expect(await popAll(lanes, q)).toEqual([1, 2, 3]);
  });

  it("an items argument that is not an array is refused with InvalidItemError, as in Python, by push, buffer push and transaction push", async () => {
    const lanes = client();
    const q = uniq("notarray");
    for (const items of ["hello", { data: 1 }]) {
      const bad = items as unknown as unknown[];
      for (const push of [() => lanes.queue(q).push(bad), () => lanes.queue(q).buffer().push(bad), async () => lanes.transaction().queue(q).push(bad).commit()]) {
        const err = await push().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InvalidItemError);
        expect(err).toMatchObject({ index: undefined, message: expect.stringMatching(/want an array of items/) });
      }
    }
    await lanes.flushAll();
    expect(await popAll(lanes, q)).toEqual([]);
  });

  it("a payload JSON would change or cannot hold is refused with the path to it", async () => {
    const lanes = client();
    const q = uniq("payload");
    const bad: [unknown, RegExp][] = [
      [Number.NaN, /payload is NaN/],
      [{ total: Infinity }, /payload.total is Infinity/],
      [{ id: 10n }, /payload.id is a BigInt/],
      [new Uint8Array([1, 2]), /binary data/],
      [Buffer.from("hi"), /binary data/],
      [[new Map()], /payload\[0\] is a Map/],
      // JSON.stringify would store [1, null]: an array cannot leave an element out.
      [[1, undefined], /payload\[1\] is undefined, which JSON would store as null/],
      [{ tags: ["a", undefined] }, /payload.tags\[1\] is undefined/],
      // eslint-disable-next-line no-sparse-arrays
      [[1, , 3], /payload\[1\] is undefined/],
      [[{ toJSON: () => undefined }], /payload\[0\] is undefined/],
    ];
    for (const [payload, why] of bad) {
      await expect(lanes.queue(q).push([{ data: payload }])).rejects.toThrow(why);
    }
    const loop: Record<string, unknown> = {};
    loop.self = loop;
    await expect(lanes.queue(q).push([loop])).rejects.toBeInstanceOf(InvalidItemError);
    await expect(lanes.queue(q).buffer().push([[undefined]])).rejects.toThrow(/payload\[0\] is undefined/);
    await lanes.queue(q).push([{ data: { at: new Date(0), skipped: undefined } }]);
    expect(await popAll(lanes, q)).toEqual([{ at: "1970-01-01T00:00:00.000Z" }]);
  });
});

describe("push buffer", () => {
  it("sends a buffered payload as it was at the push, as Go and Python do, so a later change cannot block the buffer", async () => {
    const lanes = client();
    const q = uniq("snapshot");
    const payload: Record<string, unknown> = { n: 1, at: new Date(0) };
    const b = lanes.queue(q).buffer({ messageCount: 100, timeMillis: 60_000, onError: () => {} });
    await b.push([payload]);
    payload.n = 10n; // JSON cannot hold it: encoded at the flush, it failed every flush of the buffer
    payload.at = new Date(1);
    await b.push([2]);
    await lanes.flushAll();
    expect(await popAll(lanes, q)).toEqual([{ n: 1, at: "1970-01-01T00:00:00.000Z" }, 2]);
  }, 10_000);

  it("refuses an unencodable item at push, so the items behind it are sent", async () => {
    const lanes = client();
    const q = uniq("poison");
    const errors: unknown[] = [];
    const b = lanes.queue(q).buffer({ messageCount: 5, timeMillis: 50, onError: (e) => errors.push(e) });
    await expect(b.push([1, 2, 10n, 4])).rejects.toBeInstanceOf(InvalidItemError);
    expect(b.size).toBe(0);
    await b.push([1, 2, 4, 5, 6, 7]);
    await lanes.close({ timeoutMillis: 5000 });
    expect(await popAll(lanes, q)).toEqual([1, 2, 4, 5, 6, 7]);
    expect(errors).toEqual([]);
  });

  it("drops only the item the broker refuses alone and hands it to onError", async () => {
    const lanes = client({ logger: null });
    const q = uniq("split");
    const dropped: { transactionId: string }[] = [];
    const b = lanes.queue(q).buffer({ messageCount: 10, timeMillis: 60_000, onError: (_e, items) => dropped.push(...(items as { transactionId: string }[])) });
    await b.push(Array.from({ length: 10 }, (_, i) => ({ data: i, transactionId: i === 5 ? "bad\u0000id" : `ok-${i}` })));
    await b.flush();
    expect(await popAll(lanes, q)).toEqual([0, 1, 2, 3, 4, 6, 7, 8, 9]);
    expect(dropped.map((d) => d.transactionId)).toEqual(["bad\u0000id"]);
  });

  it("after close() new buffers and buffer pushes are refused; direct pushes still work", async () => {
    const lanes = client();
    const q = uniq("closed");
    const b = lanes.queue(q).buffer({ timeMillis: 60_000 });
    await b.push([1]);
    await lanes.close();
    await expect(b.push([2])).rejects.toBeInstanceOf(ClientClosedError);
    expect(() => lanes.queue(q).partition("later").buffer()).toThrow(ClientClosedError);
    await lanes.queue(q).push([3]);
    expect(await popAll(lanes, q)).toEqual([1, 3]);
  });

  it("close() rejects with UnsentError naming how many messages are left", async () => {
    const lanes = new Lanes({ url: "http://127.0.0.1:2", retryAttempts: 0, env: {}, logger: null });
    const b = lanes.queue(uniq("down")).buffer({ timeMillis: 60_000, retryDelayMillis: 20 });
    await b.push([1, 2, 3, 4, 5]);
    const err = await lanes.close({ timeoutMillis: 300 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnsentError);
    expect((err as UnsentError).unsent).toBe(5);
    expect(b.size).toBe(5);
  });
});
