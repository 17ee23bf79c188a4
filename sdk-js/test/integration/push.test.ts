// Push item encoding and the push buffer's lifecycle against a real broker: what an item may
// be, what the buffer does with items the broker refuses, and what close() promises.
import { describe, expect, it } from "vitest";
import { InvalidItemError, Lanes } from "../../src/index.js";
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
    ];
    for (const [payload, why] of bad) {
      await expect(lanes.queue(q).push([{ data: payload }])).rejects.toThrow(why);
    }
    const loop: Record<string, unknown> = {};
    loop.self = loop;
    await expect(lanes.queue(q).push([loop])).rejects.toBeInstanceOf(InvalidItemError);
    await lanes.queue(q).push([{ data: { at: new Date(0), skipped: undefined } }]);
    expect(await popAll(lanes, q)).toEqual([{ at: "1970-01-01T00:00:00.000Z" }]);
  });
});
