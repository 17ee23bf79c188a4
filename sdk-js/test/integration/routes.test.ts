// Transactions, admin, DLQ, KV and timers against the real broker.
import { describe, expect, it } from "vitest";
import { APIError, BadRequestError, EmptyTransactionError, InvalidNameError, InvalidValueError, LanesError, TransactionError, timerOp } from "../../src/index.js";
import { brokerUrl, client, uniq } from "./helpers.js";

describe("transactions", () => {
  it("pipeline: ack the input and push the output in one commit", async () => {
    const lanes = client();
    const input = uniq("tx-in");
    const output = uniq("tx-out");
    await lanes.queue(input).push([{ data: { orderId: 9137 } }]);
    const [m] = await lanes.queue<{ orderId: number }>(input).group("invoicing").subscriptionMode("all").wait(false).pop();
    const res = await lanes
        .transaction()
        .queue(output)
        .push([{ data: { orderId: m!.data.orderId, invoiced: true } }])
        .ack(m!, "completed", { consumerGroup: "invoicing" })
        .commit();
    expect(res.success).toBe(true);
    const out = await lanes.queue(output).wait(false).pop();
    expect(out.map((x) => x.data)).toEqual([{ orderId: 9137, invoiced: true }]);
    expect(await lanes.queue(input).group("invoicing").wait(false).pop()).toEqual([]);
  });

  it("a transaction built step by step keeps every step (it accumulates, as in Go and Python)", async () => {
    const lanes = client();
    const input = uniq("tx-steps-in");
    const output = uniq("tx-steps-out");
    await lanes.queue(input).push([{ data: 1 }]);
    const [m] = await lanes.queue(input).wait(false).pop();
    const tx = lanes.transaction();
    tx.ack(m!, "completed");
    for (const n of [10, 11]) tx.queue(output).push([{ data: n }]);
    tx.kv.putIfAbsent(output, "seen", true, { ttlSeconds: 60 });
    const res = await tx.commit();
    expect(res.success).toBe(true);
    expect(res.results.map((r) => r.type)).toEqual(["ack", "push", "push"]);
    expect(res.kv?.map((r) => r.applied)).toEqual([true]);
    const out = await lanes.queue<number>(output).batch(10).wait(false).pop();
    expect(out.map((x) => x.data)).toEqual([10, 11]);
    expect(await lanes.queue(input).wait(false).pop()).toEqual([]);
  });

  it("a rejected bundle throws TransactionError with its reason", async () => {
    const lanes = client();
    const q = uniq("tx-dup");
    await lanes.queue(q).push([{ transactionId: "same", data: 1 }]);
    const err = await lanes
      .transaction()
      .queue(q)
      .push([{ transactionId: "same", data: 2 }])
      .commit()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransactionError);
    expect((err as TransactionError).reason).toBe("duplicate");
    // The broker's text alone, as APIError.brokerMessage (Go Message, Python message).
    const brokerMessage = (err as TransactionError).brokerMessage;
    expect(brokerMessage).toBe((err as TransactionError).result.error);
    expect(brokerMessage).not.toBe("");
    expect((err as TransactionError).message).toContain(brokerMessage);
  });

  it("an empty bundle throws EmptyTransactionError", async () => {
    const err = await client().transaction().commit().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmptyTransactionError);
    expect(err).toBeInstanceOf(LanesError);
    expect((err as Error).message).toMatch(/no operations/);
  });

  it("a push of no items adds nothing to the bundle, as in Go and Python", async () => {
    const lanes = client();
    const input = uniq("tx-none-in");
    const output = uniq("tx-none-out");
    await expect(lanes.transaction().queue(output).push([]).commit()).rejects.toBeInstanceOf(EmptyTransactionError);
    await lanes.queue(input).push([1]);
    const [m] = await lanes.queue(input).wait(false).pop();
    const res = await lanes.transaction().ack(m!, "completed").queue(output).push([]).commit();
    expect(res.success).toBe(true);
    expect(await lanes.queue(output).wait(false).pop()).toEqual([]);
    expect(await lanes.queue(input).wait(false).pop()).toEqual([]);
  });
});

describe("admin", () => {
  it("seek a group back and re-read", async () => {
    const lanes = client();
    const q = uniq("seek");
    await lanes.queue(q).push([{ data: 1 }]);
    const first = await lanes.queue(q).group("audit").subscriptionMode("all").wait(false).pop();
    await lanes.ack(first, "completed");
    const res = await lanes.admin.seekConsumerGroup("audit", q, { timestamp: new Date(Date.now() - 3600_000) });
    expect(res.success).toBe(true);
    const again = await lanes.queue(q).group("audit").wait(false).pop();
    expect(again.map((m) => m.data)).toEqual([1]);
    await lanes.admin.seekConsumerGroup("audit", q, { toEnd: true });
  });

  it("lists, inspects and deletes consumer groups", async () => {
    const lanes = client();
    const q = uniq("groups-admin");
    await lanes.queue(q).push([{ data: 1 }]);
    await lanes.queue(q).group("g1").subscriptionMode("all").wait(false).pop();
    const list = await lanes.admin.listConsumerGroups();
    expect(list.some((g) => g.name === "g1" && g.queueName === q)).toBe(true);
    const detail = await lanes.admin.getConsumerGroup("g1");
    expect(detail[q]).toBeDefined();
    const del = await lanes.admin.deleteConsumerGroupForQueue("g1", q);
    expect(del.success).toBe(true);
  });

  it("a name put in a URL path cannot be \".\" or \"..\": refused before sending, as in Go and Python", async () => {
    // fetch removes such a segment with the one before it: GET /api/v1/timers/../status read the
    // broker's status as a timer, and DELETE /consumer-groups/g/queues/.. was a 404 at best.
    const sent: string[] = [];
    const lanes = client({ retryAttempts: 0, fetch: (input, init) => (sent.push(String(input)), fetch(input, init)) });
    const q = uniq("dot-paths");
    const g = `${q}-g`;
    await lanes.queue(q).push([{ data: 1 }]);
    await lanes.queue(q).group(g).subscriptionMode("all").wait(false).pop();
    sent.length = 0;
    const calls: [string, () => Promise<unknown>][] = [
      ["..", () => lanes.admin.deleteConsumerGroupForQueue(g, "..", true)],
      [".", () => lanes.admin.deleteConsumerGroupForQueue(g, ".", true)],
      ["..", () => lanes.admin.deleteQueue("..")],
      ["..", () => lanes.admin.getQueueStatus("..")],
      ["..", () => lanes.admin.seekConsumerGroup(g, "..", { toEnd: true })],
      ["..", () => lanes.admin.deleteMessage("..", "t")],
      ["..", () => lanes.timers("..").get("status")],
      [".", () => lanes.timers(".").get("k")],
      ["..", () => lanes.timers(q).cancel("..")],
    ];
    for (const [name, call] of calls) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidNameError);
      expect(err).toMatchObject({ field: "path segment", value: name });
      expect((err as Error).message).toMatch(/must not be "\." or "\.\."/);
    }
    expect(sent).toEqual([]);
    expect((await lanes.admin.getConsumerGroup(g))[q]).toBeDefined();
  });

  it("dead letters: a message past its retry budget lands in the DLQ and can be replayed", async () => {
    const lanes = client();
    const q = uniq("dlq");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: "poison" }]);
    const [m] = await lanes.queue(q).wait(false).pop();
    await lanes.ack(m!, "dlq", { error: "bad payload" });
    const page = await lanes.queue(q).dlq().limit(10).get();
    expect(page.messages.map((d) => d.data)).toEqual(["poison"]);
    const replay = await lanes.admin.replayDlq(page.messages[0]!.id!);
    expect(replay.result).toBe("moved");
    const back = await lanes.queue(q).wait(false).pop();
    expect(back.map((x) => x.data)).toEqual(["poison"]);
  });

  it("dead letters paged by after while each page is replayed come once each; by offset the second page skips rows", async () => {
    const lanes = client();
    const q = uniq("dlq-after");
    await lanes.queue(q).push(["d0", "d1", "d2", "d3"].map((data) => ({ data })));
    for (let i = 0; i < 4; i++) { // one pop and ack each: four failure times, newest last
      const [m] = await lanes.queue(q).wait(false).pop();
      await lanes.ack(m!, "dlq", { error: "poison" });
    }
    const first = await lanes.queue(q).dlq().limit(2).get();
    expect(first.messages.map((d) => d.data)).toEqual(["d3", "d2"]);
    expect(first.nextAfter).toBeTruthy();
    for (const d of first.messages) expect((await lanes.admin.replayDlq(d.id)).result).toBe("moved");
    const byOffset = await lanes.admin.listDlq({ queue: q, limit: 2, offset: 2 });
    expect(byOffset.messages).toEqual([]);
    const second = await lanes.queue(q).dlq().limit(2).after(first.nextAfter!).get();
    expect(second.messages.map((d) => d.data)).toEqual(["d1", "d0"]);
    expect(second.truncated).toBe(false);
  });

  it("messages paged by after while a message is pushed come once each; by offset the second page repeats a row", async () => {
    const lanes = client();
    const q = uniq("msg-after");
    for (const data of ["m0", "m1", "m2", "m3"]) await lanes.queue(q).push([{ data }]); // four segments, newest last
    const first = await lanes.admin.listMessages({ queue: q, limit: 2 });
    expect(first.messages.map((m) => m.data)).toEqual(["m3", "m2"]);
    expect(first.nextAfter).toBeTruthy();
    await lanes.queue(q).push([{ data: "m4" }]);
    const byOffset = await lanes.admin.listMessages({ queue: q, limit: 2, offset: 2 });
    expect(byOffset.messages.map((m) => m.data)).toEqual(["m2", "m1"]);
    const second = await lanes.admin.listMessages({ queue: q, limit: 2, after: first.nextAfter! });
    expect(second.messages.map((m) => m.data)).toEqual(["m1", "m0"]);
    expect(second.truncated).toBe(false);
  });

  it("dlq() and dlq(\"\") read the builder's group, as in Go and Python; without one every group", async () => {
    const lanes = client();
    const q = uniq("dlq-group");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: "poison" }]);
    const [inGroup] = await lanes.queue(q).group("g1").subscriptionMode("all").wait(false).pop();
    await lanes.ack(inGroup!, "dlq", { error: "g1 gave up" });
    const [queueMode] = await lanes.queue(q).wait(false).pop();
    await lanes.ack(queueMode!, "dlq", { error: "queue mode gave up" });
    for (const dlq of [lanes.queue(q).group("g1").dlq(), lanes.queue(q).group("g1").dlq("")]) {
      expect((await dlq.get()).messages.map((d) => d.errorMessage)).toEqual(["g1 gave up"]);
    }
    expect((await lanes.queue(q).dlq("").get()).messages).toHaveLength(2);
  });

  it("the whole-listing calls follow the broker's pages of at most 10,000 rows", { timeout: 180_000 }, async () => {
    const lanes = client();
    const q = uniq("wide");
    const group = `${q}-g`;
    const want = Array.from({ length: 10003 }, (_, i) => `p${String(i).padStart(5, "0")}`);
    for (let from = 0; from < want.length; from += 5000) {
      // a transaction carries 10,000 operations at most
      const tx = lanes.transaction();
      for (const [i, p] of want.slice(from, from + 5000).entries()) tx.queue(q).partition(p).push([{ data: from + i }]);
      await tx.commit();
    }
    await lanes.admin.seekConsumerGroup(group, q, { timestamp: new Date(0) });

    const same = (got: string[], what: string) => {
      expect(got.length, what).toBe(want.length);
      expect(got.findIndex((name, i) => name !== want[i]), what).toBe(-1);
    };
    same((await lanes.admin.getQueue(q)).partitions.map((p) => p.name), "queue detail");
    const depth = await lanes.admin.getQueueDepth(q, group);
    same(depth.partitions.map((p) => p.partition), "queue depth");
    expect(depth.pending).toBe(10003);
    same((await lanes.admin.getQueueStatus(q, true)).partitions!.map((p) => p.name), "queue status");
    same((await lanes.admin.getConsumerGroup(group))[q]!.partitions.map((p) => p.partition), "one group");
    const lagging = await lanes.admin.laggingConsumerGroups(0);
    same(lagging.filter((r) => r.consumer_group === group).map((r) => r.partition_name), "lagging");
    await lanes.kv(q).put("k", 1, { forever: true });
    const namespaces = await lanes.kvNamespaces();
    expect(namespaces.namespaces.filter((n) => n.namespace === q)).toEqual([{ namespace: q, keys: 1 }]);
    expect(namespaces.truncated).toBe(false);
  });

  it("a message listing cut by the byte budget says where the rest starts", async () => {
    // Over the broker's answer byte budget (4 MiB by default, each payload counted twice): one a page.
    const lanes = client();
    const q = uniq("list-budget");
    for (const i of [0, 1, 2]) {
      await lanes.queue(q).push([{ data: "x".repeat(3 << 19), transactionId: `big-${i}` }]);
    }
    const got: string[] = [];
    let offset = 0;
    for (;;) {
      const page = await lanes.admin.listMessages({ queue: q, limit: 10, offset });
      expect(page.messages).toHaveLength(1);
      got.push(page.messages[0]!.transactionId);
      if (!page.truncated) {
        expect(page.nextOffset).toBeNull();
        break;
      }
      offset = page.nextOffset!;
    }
    expect(got).toEqual(["big-2", "big-1", "big-0"]);
  });

  it("queues and messages listings", async () => {
    const lanes = client();
    const q = uniq("listing");
    await lanes.queue(q).push([{ data: 1 }]);
    const queues = await lanes.admin.listQueues({ limit: 1000 });
    expect(queues.queues?.some((x) => x.name === q)).toBe(true);
    const msgs = await lanes.admin.listMessages({ queue: q });
    expect(msgs.messages?.length).toBe(1);
    const depth = await lanes.queue(q).depth();
    expect(depth.pending).toBe(1);
    const del = await lanes.queue(q).delete();
    expect(del.deleted).toBe(true);
  });
});

describe("putIfAbsent in a transaction", () => {
  it("commits the bundle with the put unapplied when the key exists; once() rolls it back", async () => {
    const lanes = client();
    const ns = uniq("tx-pia");
    const q = uniq("tx-pia-q");
    await lanes.kv(ns).put("k", "first", { forever: true });
    const res = await lanes.transaction().queue(q).push([1]).kv.putIfAbsent(ns, "k", "second", { forever: true }).commit();
    expect(res.kv?.[0]).toMatchObject({ applied: false, reason: "exists" });
    expect((await lanes.kv(ns).get("k")).value).toBe("first");
    const err = await lanes.transaction().queue(q).push([2]).kv.once(ns, "k", { forever: true }).commit().catch((e: unknown) => e);
    expect(err).toMatchObject({ reason: "kv_precondition" });
    expect((await lanes.queue(q).batch(10).wait(false).pop()).map((m) => m.data)).toEqual([1]);
  });

  it("a lost required precondition names its op, why, and the key's version and value on the error, as in Go and Python", async () => {
    const lanes = client();
    const ns = uniq("tx-prec");
    await lanes.kv(ns).put("k", { owner: "a" }, { forever: true });
    const err = await lanes.transaction().queue(uniq("tx-prec-q")).push([1]).kv.put(ns, "k", { owner: "b" }, { forever: true }, { expect: 5, required: true }).commit().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransactionError);
    expect(err).toMatchObject({ reason: "kv_precondition", failedIndex: 0, kvReason: "version", version: 1, value: { owner: "a" } });
  });
});

describe("kv and timers", () => {
  it("put, get, incr, delete", async () => {
    const lanes = client();
    const kv = lanes.kv(uniq("ns"));
    const put = await kv.put("k", { a: 1 }, { forever: true });
    expect(put.applied).toBe(true);
    expect((await kv.get("k")).value).toEqual({ a: 1 });
    expect((await kv.putIfAbsent("k", 2, { ttlSeconds: 60 })).applied).toBe(false);
    expect((await kv.incr("n", 5, { forever: true })).value).toBe(5);
    expect((await kv.delete("k")).applied).toBe(true);
    expect((await kv.get("k")).found).toBe(false);
  });

  it("the KV ttl rule of all three SDKs: ttlSeconds 0 is refused by the broker, never forever; a sub-second one is 1 s", async () => {
    const lanes = client({ retryAttempts: 0 });
    const ns = uniq("kv-ttl");
    const kv = lanes.kv(ns);
    const zero = { ttlSeconds: 0 };
    for (const call of [
      () => kv.put("k", 1, zero),
      () => kv.put("k", 1, zero, { expect: 0 }),
      () => kv.putIfAbsent("k", 1, zero),
      () => kv.incr("n", 1, zero),
      () => lanes.transaction().kv.put(ns, "k", 1, zero).commit(),
    ]) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BadRequestError);
    }
    expect((await kv.get("k")).found).toBe(false);
    expect((await kv.get("n")).found).toBe(false);
    const before = Date.now();
    const put = await kv.put("short", 1, { ttlSeconds: 0.3 });
    expect(put.applied).toBe(true);
    expect(Math.abs(Date.parse(put.expiresAt!) - before - 1000)).toBeLessThan(1500);
  });

  it("an incr without an expiry is refused with LanesError before sending, as a put is", async () => {
    const lanes = client();
    const kv = lanes.kv(uniq("incr-expiry"));
    const noExpiry = undefined as unknown as { forever: true };
    for (const call of [() => kv.incr("n", 1, noExpiry), async () => lanes.transaction().kv.incr(kv.namespace, "n", 1, noExpiry).commit(), () => kv.put("k", 1, noExpiry)]) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LanesError);
      expect((err as Error).message).toMatch(/give \{ttlSeconds: n > 0\} or \{forever: true\}/);
    }
    expect((await kv.get("n")).found).toBe(false);
  });

  it("a KV value of any depth or length that JSON.parse reads, read beside a bigint (another SDK may have written it)", async () => {
    const lanes = client();
    const ns = uniq("kv-deep");
    const depth = 5_000;
    const deep = `${"[".repeat(depth)}12345678901234567890${"]".repeat(depth)}`;
    const long = "x".repeat(10_000_000);
    const put = (key: string, value: string) =>
      fetch(`${brokerUrl()}/api/v1/kv`, { method: "POST", headers: { "content-type": "application/json" }, body: `{"operations":[{"op":"put","ns":"${ns}","key":"${key}","value":${value},"forever":true}]}` });
    expect((await put("deep", deep)).status).toBe(200);
    expect((await put("long", `{"s":"${long}","n":12345678901234567890}`)).status).toBe(200);
    let inner = (await lanes.kv(ns).get("deep")).value;
    for (let i = 0; i < depth; i++) inner = (inner as unknown[])[0] as typeof inner;
    expect(inner).toBe(12345678901234567890n);
    expect((await lanes.kv(ns).get("long")).value).toEqual({ s: long, n: 12345678901234567890n });
  });

  it("counters past 2^53 keep every digit: bigint in, bigint out; int64 overflow is applied:false limit, not a wrap", async () => {
    const lanes = client({ retryAttempts: 0 });
    const ns = uniq("kv-big");
    const kv = lanes.kv(ns);
    const int64Max = 2n ** 63n - 1n;
    // Safe integers stay numbers, as before.
    expect((await kv.incr("n", 2 ** 53 - 1, { forever: true })).value).toBe(2 ** 53 - 1);
    const past = await kv.incr("n", 2, { forever: true });
    expect(past.value).toBe(2n ** 53n + 1n);
    expect((await kv.get("n")).value).toBe(2n ** 53n + 1n);
    expect((await kv.incr("n", -2n, { forever: true })).value).toBe(2 ** 53 - 1);
    // At int64 max, with bigint delta and bounds.
    expect((await kv.incr("top", int64Max, { forever: true }, { max: int64Max })).value).toBe(int64Max);
    const over = await kv.incr("top", 1, { forever: true });
    expect(over).toMatchObject({ applied: false, reason: "limit", value: int64Max });
    expect((await kv.incr("top", -1n, { forever: true }, { min: int64Max - 1n })).value).toBe(int64Max - 1n);
    expect((await kv.incr("low", -int64Max - 1n, { forever: true })).value).toBe(-int64Max - 1n);
    expect(await kv.incr("low", -1, { forever: true })).toMatchObject({ applied: false, reason: "limit", value: -int64Max - 1n });
    // A delta int64 cannot hold is refused unsent, in the batch and the transaction builder too.
    for (const call of [
      () => kv.incr("n", int64Max + 1n, { forever: true }),
      () => kv.incr("n", 1, { forever: true }, { min: -int64Max - 2n }),
      () => kv.batch([{ op: "incr", ns, key: "n", delta: int64Max + 1n, forever: true }]),
      async () => lanes.transaction().kv.incr(ns, "n", int64Max + 1n, { forever: true }).commit(),
    ]) {
      await expect(call()).rejects.toBeInstanceOf(InvalidValueError);
    }
    // Values of any depth, the transaction rider, getMany and list read the same way; bigints may be written.
    const doc = { id: 2n ** 64n, small: 7, float: 1.5, list: [-(2n ** 60n)] };
    expect((await kv.put("doc", doc, { forever: true })).value).toEqual(doc);
    const tx = await lanes.transaction().kv.incr(ns, "n", 1n, { forever: true }).kv.get(ns, "doc").commit();
    expect(tx.kv?.map((r) => r.value)).toEqual([2n ** 53n, doc]);
    expect((await kv.getMany(["doc", "top"])).rows?.map((r) => r.value)).toEqual([doc, int64Max - 1n]);
    expect((await kv.list({ prefix: "top" })).rows.map((r) => r.value)).toEqual([int64Max - 1n]);
    // A push payload still refuses a bigint: only the KV routes read and write them.
    await expect(lanes.queue(uniq("kv-big-q")).push([{ data: 1n }])).rejects.toThrow(/BigInt/);
  });

  it("incr sends a number delta, min or max as its exact value, and one no int64 holds (NaN, Infinity, 1.5, 2 ** 63) throws InvalidValueError unsent", async () => {
    const lanes = client({ retryAttempts: 0 });
    const ns = uniq("kv-num");
    const kv = lanes.kv(ns);
    // -(2 ** 63) is int64's minimum exactly; JSON.stringify writes it -9223372036854776000, past int64.
    expect((await kv.incr("low", -(2 ** 63), { forever: true }, { min: -(2 ** 63) })).value).toBe(-(2n ** 63n));
    expect((await kv.batch([{ op: "incr", ns, key: "low2", delta: -(2 ** 63), forever: true }]))[0]?.value).toBe(-(2n ** 63n));
    expect((await lanes.transaction().kv.incr(ns, "low3", -(2 ** 63), { forever: true }).commit()).kv?.[0]?.value).toBe(-(2n ** 63n));
    for (const bad of [NaN, Infinity, -Infinity, 1.5, 2 ** 63, -(2 ** 64)]) {
      await expect(kv.incr("n", bad, { forever: true }), String(bad)).rejects.toBeInstanceOf(InvalidValueError);
      await expect(kv.incr("n", 1, { forever: true }, { max: bad }), String(bad)).rejects.toBeInstanceOf(InvalidValueError);
      await expect(kv.batch([{ op: "incr", ns, key: "n", delta: 1, min: bad, forever: true }]), String(bad)).rejects.toBeInstanceOf(InvalidValueError);
      expect(() => lanes.transaction().kv.incr(ns, "n", bad, { forever: true }), String(bad)).toThrow(InvalidValueError);
    }
    await expect(kv.incr("n", NaN, { forever: true })).rejects.toThrow(/delta NaN is not an integer/);
    expect((await kv.get("n")).found).toBe(false);
  });

  it("a put answers the value as every get reads it: jsonb's form, keys in jsonb's order", async () => {
    const lanes = client();
    const ns = uniq("kv-form");
    const kv = lanes.kv(ns);
    const value = { zzz: 1, a: "x", mm: [1.5, null] };
    const put = await kv.put("k", value, { forever: true });
    const got = await kv.get("k");
    expect(put.value).toEqual(value);
    expect(Object.keys(put.value as object)).toEqual(["a", "mm", "zzz"]);
    expect(Object.keys(got.value as object)).toEqual(["a", "mm", "zzz"]);
    const res = await lanes.transaction().kv.put(ns, "rider", value, { forever: true }).commit();
    expect(Object.keys(res.kv?.[0]?.value as object)).toEqual(["a", "mm", "zzz"]);
  });

  it("schedule, read and cancel a timer", async () => {
    const lanes = client();
    const t = lanes.timers(uniq("timers"));
    const res = await t.schedule("reminder-1", { delayMillis: 3_600_000, payload: { remind: true } });
    expect(res.status).toBe("scheduled");
    const read = await t.get("reminder-1");
    expect(read.found).toBe(true);
    // As on the wire: the base64 of the payload's JSON (Go reads the JSON bytes, Python the JSON text).
    expect(Buffer.from(read.payload!, "base64").toString("utf8")).toBe('{"remind":true}');
    expect((await t.cancel("reminder-1")).status).toBe("cancelled");
  });

  it("refuses KV values and timer payloads JSON cannot hold as given, before any request", async () => {
    const lanes = client();
    const ns = uniq("kv-json");
    const kv = lanes.kv(ns);
    // A bigint is no longer here: KV values send it as its digits (the 2^53 test above).
    for (const bad of [NaN, Infinity, new Map([["a", 1]]), new Uint8Array([1, 2])]) {
      await expect(kv.put("k", bad, { forever: true })).rejects.toBeInstanceOf(InvalidValueError);
      await expect(kv.putIfAbsent("k", { nested: [bad] }, { forever: true })).rejects.toBeInstanceOf(InvalidValueError);
      expect(() => lanes.transaction().kv.put(ns, "k", bad, { forever: true })).toThrow(InvalidValueError);
      // In a batch too (a raw KvOperation), as Go's KV.Batch and Python's batch refuse it.
      await expect(kv.batch([{ op: "get", ns, key: "k" }, { op: "putIfAbsent", ns, key: "k", value: bad as never, forever: true }])).rejects.toBeInstanceOf(InvalidValueError);
    }
    await expect(kv.put("k", [1, undefined], { forever: true })).rejects.toThrow(/value\[1\] is undefined/);
    await expect(kv.batch([{ op: "put", ns, key: "k", value: [1, undefined] as never, forever: true }])).rejects.toThrow(/value\[1\] is undefined/);
    expect((await kv.get("k")).found).toBe(false);
    const q = uniq("timer-json");
    await expect(lanes.timers(q).schedule("t", { delayMillis: 0, payload: { at: Infinity } })).rejects.toBeInstanceOf(InvalidValueError);
    await expect(lanes.timers(q).schedule("t", { delayMillis: 0, payload: { n: 10n } })).rejects.toBeInstanceOf(InvalidValueError);
    expect(() => lanes.transaction().timer(q, "t", { delayMillis: 0, payload: new Set([1]) })).toThrow(InvalidValueError);
    await expect(lanes.timers(q).schedule("t", { delayMillis: 0, payload: [undefined] })).rejects.toThrow(/payload\[0\] is undefined/);
    expect((await lanes.timers(q).get("t")).found).toBe(false);
  });

  it("kv getMany refuses keys that are not an array before sending, as Python's TypeError", async () => {
    const sent: string[] = [];
    const lanes = client({ fetch: (input, init) => (sent.push(String(input)), fetch(input, init)) });
    const kv = lanes.kv(uniq("kv-getmany"));
    await kv.put("abc", 1, { forever: true });
    sent.length = 0;
    for (const bad of ["abc", undefined, { 0: "abc" }]) {
      const err = await kv.getMany(bad as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LanesError);
      expect(err).not.toBeInstanceOf(APIError);
      expect((err as Error).message).toMatch(/keys must be an array/);
    }
    expect(sent).toEqual([]);
    expect((await kv.getMany(["abc"])).rows?.map((r) => r.key)).toEqual(["abc"]);
  });

  it("timers(q).batch sends several timerOp operations, for any queue, in one request", async () => {
    const lanes = client();
    const q = uniq("timer-batch");
    const other = uniq("timer-batch-other");
    const res = await lanes.timers(q).batch([
      timerOp("schedule", q, "a", { delayMillis: 0, payload: { n: 1 } }),
      timerOp("schedule", other, "b", { delayMillis: 3_600_000, transactionId: "b-1" }),
      timerOp("cancel", q, "never-scheduled"),
    ]);
    expect(res.map((r) => [r.queue, r.timerKey])).toEqual([[q, "a"], [other, "b"], [q, "never-scheduled"]]);
    expect(res[1]!.txn).toBe("b-1");
    expect((await lanes.timers(other).get("b")).found).toBe(true);
    expect((await lanes.queue(q).timeoutMillis(5000).pop())[0]?.data).toEqual({ n: 1 });
    expect(() => timerOp("schedule", q, "t", { delayMillis: 0, payload: NaN })).toThrow(InvalidValueError);
  });

  it("a timer without a payload fires {}, one with an explicit null fires null", async () => {
    const lanes = client();
    const q = uniq("timer-payload");
    await lanes.timers(q).schedule("none", { delayMillis: 0, partition: "none" });
    await lanes.timers(q).schedule("null", { delayMillis: 0, partition: "null", payload: null });
    const data = async (partition: string) => (await lanes.queue(q).partition(partition).timeoutMillis(5000).pop())[0]?.data;
    expect(await data("none")).toEqual({});
    expect(await data("null")).toBeNull();
  });
});
