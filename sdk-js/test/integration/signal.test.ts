// Every call that sends a request takes an AbortSignal: its abort ends the request in flight and
// any retry wait at once, throwing the signal's reason (as the walks and consume loops do), and
// nothing is sent after it. The broker's test fault scripts hold the answers and count what
// reaches them (scripts/test-broker.sh serves them).
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { getEventListeners } from "node:events";
import { ClientClosedError, type Lanes, type LanesOptions } from "../../src/index.js";
import { brokerUrl, client, sleep, uniq } from "./helpers.js";

const runs: string[] = [];
afterEach(async () => {
  for (const run of runs.splice(0)) await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "DELETE" });
});

/** scripted sets a fault script of one rule and returns a client under it and how many requests reached the rule so far. */
async function scripted(rule: unknown, o: LanesOptions = {}): Promise<{ lanes: Lanes; attempts: () => Promise<number> }> {
  const run = `js-${randomUUID().slice(0, 12)}`;
  const res = await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules: [rule] }) });
  expect(res.status, "the test broker serves no fault scripts: start it with scripts/test-broker.sh (LANES_TEST_FAULTS on)").toBe(204);
  runs.push(run);
  const attempts = async () => {
    const counts = (await (await fetch(`${brokerUrl()}/__test/faults/${run}`)).json()) as { rules: { attempts: number }[] };
    return counts.rules[0]!.attempts;
  };
  return { lanes: client({ headers: { "X-Lanes-Test-Run": run }, ...o }), attempts };
}

/** reached waits until the broker has counted n requests of the rule. */
async function reached(attempts: () => Promise<number>, n: number): Promise<void> {
  const until = Date.now() + 5000;
  while ((await attempts()) < n) {
    if (Date.now() > until) throw new Error(`the broker saw fewer than ${n} request(s) in 5 s`);
    await sleep(20);
  }
}

/** abortEndsCall aborts `ctl` once the broker holds the call's first request, then expects the call to reject with the abort's reason within a second, and no request after it. */
async function abortEndsCall(call: Promise<unknown>, ctl: AbortController, attempts: () => Promise<number>, settle = 0): Promise<void> {
  // A call that resolves or fails on its own must fail the test, not go unhandled.
  const outcome = call.then(
    (value) => ({ value }),
    (err: unknown) => ({ err }),
  );
  await reached(attempts, 1);
  await sleep(settle);
  const reason = new Error("caller gave up");
  const abortedAt = Date.now();
  ctl.abort(reason);
  const late = sleep(1000).then(() => ({ late: "still running 1 s after the abort" }));
  const got = await Promise.race([outcome, late]);
  expect(got).toEqual({ err: reason });
  expect(Date.now() - abortedAt).toBeLessThan(1000);
  await sleep(300); // a retry (50 ms backoff in these clients) would have been sent by now
  expect(await attempts(), "no request after the abort").toBe(1);
}

// A pass that holds the broker's answer: the request is served, its answer sent 5 s later unless the client leaves.
const held = { pass: true, holdAnswerMs: 5000 };

describe("AbortSignal", () => {
  type Listing = [name: string, method: string, path: (q: string) => string, call: (l: Lanes, q: string, signal: AbortSignal) => Promise<unknown>];
  const listings: Listing[] = [
    ["admin.listQueues", "GET", () => "/api/v1/resources/queues", (l, q, signal) => l.admin.listQueues({ namespace: q }, { signal })],
    ["admin.listQueueStatus", "GET", () => "/api/v1/status/queues", (l, q, signal) => l.admin.listQueueStatus({ queue: q }, { signal })],
    ["admin.listDlq", "GET", () => "/api/v1/dlq", (l, q, signal) => l.admin.listDlq({ queue: q }, { signal })],
    ["admin.listMessages", "GET", () => "/api/v1/messages", (l, q, signal) => l.admin.listMessages({ queue: q }, { signal })],
    ["admin.getStatus", "GET", () => "/api/v1/status", (l, q, signal) => l.admin.getStatus({ queue: q }, { signal })],
    ["queue.dlq.get", "GET", () => "/api/v1/dlq", (l, q, signal) => l.queue(q).dlq().limit(10).get({ signal })],
    ["kv.list", "POST", () => "/api/v1/resources/kv/list", (l, q, signal) => l.kv(q).list({ prefix: "a" }, { signal })],
    ["kv.getPrefix", "POST", () => "/api/v1/kv", (l, q, signal) => l.kv(q).getPrefix("a", { limit: 10 }, { signal })],
    ["timers.list", "GET", (q) => `/api/v1/timers/${q}`, (l, q, signal) => l.timers(q).list({ limit: 10 }, { signal })],
  ];

  it.each(listings)("%s: a one-page listing ends at the abort while the broker holds its answer", async (_, method, path, call) => {
    const q = uniq("signal-page");
    const { lanes, attempts } = await scripted({ method, path: path(q), responses: [held] });
    const ctl = new AbortController();
    await abortEndsCall(call(lanes, q, ctl.signal), ctl, attempts);
  });

  it.each([
    ["a 429's Retry-After", { status: 429, headers: { "Retry-After": "5" } }, {}],
    ["a 503's backoff", { status: 503 }, { retryDelayMillis: 5000, maxRetryDelayMillis: 5000 }],
  ])("an abort ends %s wait at once and sends no retry", async (_, fault, o) => {
    const q = uniq("signal-wait");
    const { lanes, attempts } = await scripted({ method: "GET", path: "/api/v1/resources/queues", responses: [fault] }, o);
    const ctl = new AbortController();
    // The fault is answered at once; 200 ms later the SDK is in its retry wait.
    await abortEndsCall(lanes.admin.listQueues({ namespace: q }, { signal: ctl.signal }), ctl, attempts, 200);
  });

  it("AbortSignal.timeout gives a call a deadline: it rejects with the signal's TimeoutError", async () => {
    const q = uniq("signal-timeout");
    const { lanes, attempts } = await scripted({ method: "GET", path: "/api/v1/messages", responses: [held] });
    const started = Date.now();
    const err = await lanes.admin.listMessages({ queue: q }, { signal: AbortSignal.timeout(300) }).then(
      () => "resolved",
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ name: "TimeoutError" });
    expect(Date.now() - started).toBeLessThan(1500);
    await sleep(300);
    expect(await attempts()).toBe(1);
  });

  // Every call that sends a request, with its signal where it takes it (docs/sdk-design.md §6).
  // The fault holds every request of the run unanswered; nothing reaches the broker's handlers
  // (a group, where one is named, is the test's own all the same).
  type Call = [name: string, call: (l: Lanes, q: string, signal: AbortSignal) => Promise<unknown>];
  const target = { transactionId: "0190b6a2-0000-7000-8000-000000000001", partitionId: "0190b6a2-0000-7000-8000-000000000002", leaseId: "lease" };
  const calls: Call[] = [
    ["health", (l, _, signal) => l.health({ signal })],
    ["kvNamespaces", (l, _, signal) => l.kvNamespaces({ signal })],
    ["ack", (l, _, signal) => l.ack(target, "completed", { signal })],
    ["ack of several", (l, _, signal) => l.ack([target, { ...target, transactionId: "0190b6a2-0000-7000-8000-000000000003" }], "completed", { signal })],
    ["renew", (l, _, signal) => l.renew("lease", { signal })],
    ["queue.push", (l, q, signal) => l.queue(q).push([1], { signal })],
    ["queue.pop", (l, q, signal) => l.queue(q).wait(false).pop({ signal })],
    ["queue.popResult", (l, q, signal) => l.queue(q).wait(false).popResult({ signal })],
    ["queue.create", (l, q, signal) => l.queue(q).create({ signal })],
    ["queue.delete", (l, q, signal) => l.queue(q).delete({ signal })],
    ["queue.depth", (l, q, signal) => l.queue(q).depth({ signal })],
    ["queue.dlq.get", (l, q, signal) => l.queue(q).dlq().get({ signal })],
    ["queue.dlq.all", (l, q, signal) => l.queue(q).dlq().all({ signal }).next()],
    ["transaction.commit", (l, q, signal) => l.transaction().queue(q).push([1]).commit({ signal })],
    ["kv.get", (l, q, signal) => l.kv(q).get("k", { signal })],
    ["kv.getMany", (l, q, signal) => l.kv(q).getMany(["k"], { signal })],
    ["kv.getPrefix", (l, q, signal) => l.kv(q).getPrefix("k", {}, { signal })],
    ["kv.put", (l, q, signal) => l.kv(q).put("k", 1, { forever: true }, { signal })],
    ["kv.putIfAbsent", (l, q, signal) => l.kv(q).putIfAbsent("k", 1, { forever: true }, { signal })],
    ["kv.delete", (l, q, signal) => l.kv(q).delete("k", { signal })],
    ["kv.incr", (l, q, signal) => l.kv(q).incr("k", 1, { forever: true }, { signal })],
    ["kv.batch", (l, q, signal) => l.kv(q).batch([{ op: "get", ns: q, key: "k" }], { signal })],
    ["kv.list", (l, q, signal) => l.kv(q).list({}, { signal })],
    ["timers.schedule", (l, q, signal) => l.timers(q).schedule("t", { delayMillis: 60_000 }, { signal })],
    ["timers.reschedule", (l, q, signal) => l.timers(q).reschedule("t", { delayMillis: 60_000 }, { signal })],
    ["timers.cancel", (l, q, signal) => l.timers(q).cancel("t", { signal })],
    ["timers.get", (l, q, signal) => l.timers(q).get("t", { signal })],
    ["timers.list", (l, q, signal) => l.timers(q).list({}, { signal })],
    ["timers.batch", (l, q, signal) => l.timers(q).batch([{ op: "cancel", queue: q, timerKey: "t" }], { signal })],
    ["admin.configureQueue", (l, q, signal) => l.admin.configureQueue(q, {}, { mode: "merge", signal })],
    ["admin.getQueue", (l, q, signal) => l.admin.getQueue(q, { signal })],
    ["admin.listQueues", (l, q, signal) => l.admin.listQueues({ namespace: q }, { signal })],
    ["admin.allQueues", (l, q, signal) => l.admin.allQueues({ namespace: q }, { signal }).next()],
    ["admin.deleteQueue", (l, q, signal) => l.admin.deleteQueue(q, { signal })],
    ["admin.getQueueDepth", (l, q, signal) => l.admin.getQueueDepth(q, undefined, { signal })],
    ["admin.getOverview", (l, _, signal) => l.admin.getOverview({ signal })],
    ["admin.getNamespaces", (l, _, signal) => l.admin.getNamespaces({ signal })],
    ["admin.getTasks", (l, _, signal) => l.admin.getTasks({ signal })],
    ["admin.seekConsumerGroup", (l, q, signal) => l.admin.seekConsumerGroup(`${q}-g`, q, { toEnd: true }, { signal })],
    ["admin.seekConsumerGroupPartition", (l, q, signal) => l.admin.seekConsumerGroupPartition(`${q}-g`, q, "p", { toEnd: true }, { signal })],
    ["admin.listConsumerGroups", (l, _, signal) => l.admin.listConsumerGroups({ signal })],
    ["admin.getConsumerGroup", (l, q, signal) => l.admin.getConsumerGroup(`${q}-g`, { signal })],
    ["admin.laggingConsumerGroups", (l, _, signal) => l.admin.laggingConsumerGroups(undefined, { signal })],
    ["admin.deleteConsumerGroup", (l, q, signal) => l.admin.deleteConsumerGroup(`${q}-g`, undefined, { signal })],
    ["admin.deleteConsumerGroupForQueue", (l, q, signal) => l.admin.deleteConsumerGroupForQueue(`${q}-g`, q, undefined, { signal })],
    ["admin.updateSubscription", (l, q, signal) => l.admin.updateSubscription(`${q}-g`, new Date(), { signal })],
    ["admin.listDlq", (l, q, signal) => l.admin.listDlq({ queue: q }, { signal })],
    ["admin.allDlq", (l, q, signal) => l.admin.allDlq({ queue: q }, { signal }).next()],
    ["admin.purgeDlq", (l, q, signal) => l.admin.purgeDlq(q, undefined, { signal })],
    ["admin.replayDlq", (l, _, signal) => l.admin.replayDlq("0190b6a2-0000-7000-8000-000000000004", {}, { signal })],
    ["admin.listMessages", (l, q, signal) => l.admin.listMessages({ queue: q }, { signal })],
    ["admin.allMessages", (l, q, signal) => l.admin.allMessages({ queue: q }, { signal }).next()],
    ["admin.getMessage", (l, _, signal) => l.admin.getMessage(target.partitionId, target.transactionId, { signal })],
    ["admin.deleteMessage", (l, _, signal) => l.admin.deleteMessage(target.partitionId, target.transactionId, { signal })],
    ["admin.retryMessage", (l, _, signal) => l.admin.retryMessage(target.partitionId, target.transactionId, { signal })],
    ["admin.health", (l, _, signal) => l.admin.health({ signal })],
    ["admin.getMetrics", (l, _, signal) => l.admin.getMetrics({ signal })],
    ["admin.getStatus", (l, q, signal) => l.admin.getStatus({ queue: q }, { signal })],
    ["admin.listQueueStatus", (l, q, signal) => l.admin.listQueueStatus({ queue: q }, { signal })],
    ["admin.allQueueStatus", (l, q, signal) => l.admin.allQueueStatus({ queue: q }, { signal }).next()],
    ["admin.getQueueStatus", (l, q, signal) => l.admin.getQueueStatus(q, undefined, { signal })],
    ["admin.getBufferStatus", (l, _, signal) => l.admin.getBufferStatus({ signal })],
    ["admin.getMaintenanceMode", (l, _, signal) => l.admin.getMaintenanceMode({ signal })],
    ["admin.setMaintenanceMode", (l, _, signal) => l.admin.setMaintenanceMode(false, { signal })],
    ["admin.getPopMaintenanceMode", (l, _, signal) => l.admin.getPopMaintenanceMode({ signal })],
    ["admin.setPopMaintenanceMode", (l, _, signal) => l.admin.setPopMaintenanceMode(false, { signal })],
  ];

  it.each(calls)("%s: the abort ends the request in flight", async (_, call) => {
    const q = uniq("signal-call");
    // Every request of the run waits 10 s for a scripted answer that the abort cuts short.
    const { lanes, attempts } = await scripted({ path: "/*", responses: [{ status: 200, delayMs: 10_000 }] });
    const ctl = new AbortController();
    await abortEndsCall(call(lanes, q, ctl.signal), ctl, attempts);
  });
});

// A push buffer's waits take a signal too: its abort ends the caller's wait, never the flush the
// buffer's pushes share, and never loses or duplicates an item (docs/sdk-design.md §2).
describe("AbortSignal on a push buffer", () => {
  /** heldPush is a rule under which the broker stores the buffer's first push at once and holds its answer `ms`: the flush stays in flight. */
  const heldPush = (ms: number) => ({ method: "POST", path: "/api/v1/push", responses: [{ pass: true, holdAnswerMs: ms }] });
  /** popAll pops what the queue holds and acks it, so the partition's next pop sees what comes after. */
  const popAll = async (lanes: Lanes, q: string) => {
    const messages = await lanes.queue(q).autopilot(false).batch(50).wait(false).pop();
    if (messages.length > 0) await lanes.ack(messages);
    return messages.map((m) => m.data);
  };
  type Buffer = ReturnType<ReturnType<Lanes["queue"]>["buffer"]>;

  it.each([
    ["buffer.flush", (_: Lanes, b: Buffer, signal: AbortSignal) => b.flush({ signal })],
    ["lanes.flushAll", (l: Lanes, _: Buffer, signal: AbortSignal) => l.flushAll({ signal })],
  ])("%s: the abort ends the wait at once; the flush in flight goes on and delivers the items once", async (_, flush) => {
    const q = uniq("signal-flush");
    const { lanes, attempts } = await scripted(heldPush(1500));
    const b = lanes.queue(q).buffer({ timeMillis: 60_000 });
    await b.push([1, 2, 3]);
    const ctl = new AbortController();
    await abortEndsCall(flush(lanes, b, ctl.signal), ctl, attempts);
    expect(b.size, "the items stay buffered until their flush is answered").toBe(3);
    // Nobody flushes again: the background flush alone sends them.
    const until = Date.now() + 5000;
    while (b.size > 0 && Date.now() < until) await sleep(20);
    expect(b.size, "the flush in flight ended and sent the items").toBe(0);
    expect(await attempts(), "that flush was not cut and sent again").toBe(1);
    expect(await popAll(lanes, q)).toEqual([1, 2, 3]);
  });

  it("buffer.push: the abort ends a wait for room; that push enqueues nothing, the items before it are delivered", async () => {
    const q = uniq("signal-room");
    const { lanes, attempts } = await scripted(heldPush(1500));
    const b = lanes.queue(q).buffer({ messageCount: 2, maxSize: 2, timeMillis: 60_000 });
    await b.push([1, 2]); // a full batch: its flush starts, and the broker holds its answer
    const ctl = new AbortController();
    await abortEndsCall(b.push([3], { signal: ctl.signal }), ctl, attempts);
    expect(b.size, "only the items before the aborted push wait").toBe(2);
    await b.flush();
    expect(await popAll(lanes, q)).toEqual([1, 2]);
    // Nothing of the aborted push was queued, so pushing it again stores it once.
    await b.push([3]);
    await b.flush();
    expect(await popAll(lanes, q)).toEqual([3]);
    expect(await attempts()).toBe(2);
  });

  it("lanes.close: the abort ends the close at once; its items stay buffered and a later close() delivers them once", async () => {
    const q = uniq("signal-close");
    const { lanes, attempts } = await scripted(heldPush(5000));
    const b = lanes.queue(q).buffer({ timeMillis: 60_000 });
    await b.push([1, 2, 3]);
    const ctl = new AbortController();
    await abortEndsCall(lanes.close({ signal: ctl.signal }), ctl, attempts);
    expect(b.size, "an aborted close keeps what it could not send").toBe(3);
    await expect(b.push([4]), "the client is closed all the same").rejects.toBeInstanceOf(ClientClosedError);
    // The broker had stored the cut push: sent again under the same transaction ids, it is a duplicate.
    await lanes.close();
    expect(await attempts()).toBe(2);
    expect(b.size).toBe(0);
    expect(await popAll(lanes, q)).toEqual([1, 2, 3]);
  });

  it("lanes.close again at once after an aborted close: the cut push ends and the new close delivers the items once", async () => {
    const q = uniq("signal-reclose");
    const { lanes, attempts } = await scripted(heldPush(1500));
    const b = lanes.queue(q).buffer({ timeMillis: 60_000 });
    await b.push([1, 2]);
    const ctl = new AbortController();
    const first = lanes.close({ signal: ctl.signal }).catch((err: unknown) => err);
    await reached(attempts, 1);
    const reason = new Error("caller gave up");
    ctl.abort(reason);
    expect(await first).toBe(reason);
    // No pause: the first close's push is still being cut. A cut flusher that went on looping
    // here spun on its aborted signal without yielding, and this close never returned.
    await lanes.close();
    expect(b.size).toBe(0);
    expect(await attempts(), "the cut push, then one more").toBe(2);
    expect(await popAll(lanes, q)).toEqual([1, 2]);
  });

  it("lanes.flushAll and lanes.close over several buffers: the abort ends the wait; every buffer's items are delivered once", async () => {
    const qs = ["a", "b", "c"].map((s) => uniq(`signal-many-${s}`));
    // Each of the six pushes (a flush and a close per buffer) is stored at once and its answer held.
    const hold = { pass: true, holdAnswerMs: 1500 };
    const { lanes, attempts } = await scripted({ method: "POST", path: "/api/v1/push", responses: Array(6).fill(hold) });
    const buffers = qs.map((q) => lanes.queue(q).buffer({ timeMillis: 60_000 }));
    for (const [i, b] of buffers.entries()) await b.push([i * 10 + 1, i * 10 + 2]);
    const reason = new Error("caller gave up");
    /** abortOnceHeld starts call, aborts it once the broker holds n pushes in all, and returns what it rejected with. */
    const abortOnceHeld = async (call: (signal: AbortSignal) => Promise<unknown>, n: number) => {
      const ctl = new AbortController();
      const outcome = call(ctl.signal).then(
        () => "resolved",
        (err: unknown) => err,
      );
      await reached(attempts, n);
      const abortedAt = Date.now();
      ctl.abort(reason);
      const got = await outcome;
      expect(Date.now() - abortedAt, "the call ended within a second of the abort").toBeLessThan(1000);
      return got;
    };
    // flushAll: one flush per buffer is held; the abort ends the wait, not those flushes.
    expect(await abortOnceHeld((signal) => lanes.flushAll({ signal }), buffers.length)).toBe(reason);
    expect(
      buffers.map((b) => b.size),
      "the items stay buffered until their flush is answered",
    ).toEqual([2, 2, 2]);
    const until = Date.now() + 5000;
    while (buffers.some((b) => b.size > 0) && Date.now() < until) await sleep(20);
    expect(buffers.map((b) => b.size)).toEqual([0, 0, 0]);
    expect(await attempts(), "no flush was cut and sent again").toBe(buffers.length);
    // close: each buffer's push is held and cut by the abort; every buffer keeps its item.
    for (const [i, b] of buffers.entries()) await b.push([i * 10 + 3]);
    expect(await abortOnceHeld((signal) => lanes.close({ signal }), 2 * buffers.length)).toBe(reason);
    expect(
      buffers.map((b) => b.size),
      "an aborted close keeps every buffer's unsent items",
    ).toEqual([1, 1, 1]);
    await lanes.close(); // sends them again under the same transaction ids
    expect(buffers.map((b) => b.size)).toEqual([0, 0, 0]);
    for (const [i, q] of qs.entries()) expect(await popAll(lanes, q)).toEqual([i * 10 + 1, i * 10 + 2, i * 10 + 3]);
  });

  it("an already aborted signal: push enqueues nothing and flush, flushAll and close reject with its reason at once", async () => {
    const lanes = client();
    const q = uniq("signal-aborted");
    const b = lanes.queue(q).buffer({ timeMillis: 60_000 });
    const reason = new Error("gave up before");
    const signal = AbortSignal.abort(reason);
    await expect(b.push([1], { signal })).rejects.toBe(reason);
    expect(b.size, "an aborted push queues nothing, even with room").toBe(0);
    await b.push([2]);
    await expect(b.flush({ signal })).rejects.toBe(reason);
    await expect(lanes.flushAll({ signal })).rejects.toBe(reason);
    expect(b.size).toBe(1);
    await expect(lanes.close({ signal })).rejects.toBe(reason);
    await expect(b.push([3]), "close closed the client all the same").rejects.toBeInstanceOf(ClientClosedError);
    await lanes.close();
    expect(await popAll(lanes, q)).toEqual([2]);
    // Without a buffer too: the client closes and the call rejects.
    const bare = client();
    await expect(bare.close({ signal })).rejects.toBe(reason);
    expect(() => bare.queue(q).buffer()).toThrow(ClientClosedError);
  });

  it("a signal kept for many buffer calls holds no listener after each ends", async () => {
    const lanes = client();
    const q = uniq("signal-listeners");
    const b = lanes.queue(q).buffer({ messageCount: 2, maxSize: 2, timeMillis: 60_000 });
    const { signal } = new AbortController();
    for (let i = 0; i < 5; i++) await b.push([i, i + 10], { signal }); // from the second on, each waits for room
    await b.flush({ signal });
    await lanes.flushAll({ signal });
    await lanes.close({ signal });
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
    expect(await popAll(lanes, q)).toEqual([0, 10, 1, 11, 2, 12, 3, 13, 4, 14]);
  });
});
