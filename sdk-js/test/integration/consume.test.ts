// The consume loop and the message iterator against the real broker.
import { setTimeout as delay } from "node:timers/promises";
import { describe, expect, it, vi } from "vitest";
import { AckError, BadRequestError, ConsumerStoppedError, AutoAckDroppedError, HandlerError, InvalidNameError, type Consumer, type Message, type QueueBuilder } from "../../src/index.js";
import { brokerUrl, client, sleep, uniq } from "./helpers.js";

describe("consume", () => {
  it("keeps order per partition with concurrency > 1", async () => {
    const lanes = client();
    const q = uniq("order");
    const parts = ["a", "b", "c", "d"];
    for (const p of parts) await lanes.queue(q).partition(p).push(Array.from({ length: 10 }, (_, i) => ({ data: { p, i } })));
    const seen = new Map<string, number[]>();
    await lanes
      .queue<{ p: string; i: number }>(q)
      .concurrency(4)
      .batch(3)
      .limit(40)
      .idleMillis(3000)
      .consume(async (m) => {
        const list = seen.get(m.data.p) ?? [];
        list.push(m.data.i);
        seen.set(m.data.p, list);
        await sleep(Math.random() * 5);
      });
    for (const p of parts) expect(seen.get(p)).toEqual(Array.from({ length: 10 }, (_, i) => i));
  });

  it("nacks a throwing handler and redelivers the message", async () => {
    const lanes = client();
    const q = uniq("nackloop");
    await lanes.queue(q).push([{ data: "poison" }, { data: "next" }]);
    const calls: string[] = [];
    let failed = false;
    await lanes
      .queue<string>(q)
      .batch(2)
      .limit(3)
      .idleMillis(3000)
      .consume((m) => {
        calls.push(m.data);
        if (m.data === "poison" && !failed) {
          failed = true;
          throw new Error("first try fails");
        }
      });
    expect(calls).toEqual(["poison", "poison", "next"]);
  });

  it("renews the lease of a slow handler", async () => {
    const lanes = client();
    const q = uniq("renewloop");
    await lanes.queue(q).push([{ data: "slow" }]);
    const errors: unknown[] = [];
    let handled = 0;
    await lanes
      .queue(q)
      .leaseSeconds(1)
      .renewLease(true, 300)
      .limit(1)
      .onError((e) => errors.push(e))
      .consume(async () => {
        handled++;
        await sleep(2500); // longer than the 1 s lease
      });
    expect(handled).toBe(1);
    expect(errors).toEqual([]); // the ack was applied under a live lease
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
  });

  it("renews the lease of a slow handler by default; renewLease(false) turns it off", async () => {
    const lanes = client();
    // A handler slower than its 1 s lease lets a second consumer pop meanwhile; returns what that consumer got and the loop's errors.
    const runSlow = async (q: string, renew: (b: QueueBuilder) => QueueBuilder = (b) => b) => {
      const errors: unknown[] = [];
      let stolen = -1;
      await renew(lanes.queue(q))
        .wait(false)
        .leaseSeconds(1)
        .limit(1)
        .onError((e) => errors.push(e))
        .consume(async () => {
          await sleep(1500);
          stolen = (await lanes.queue(q).wait(false).pop()).length;
          await sleep(1000);
        });
      return { stolen, errors };
    };
    const q = uniq("defaultrenew");
    await lanes.queue(q).push([{ data: "slow" }]);
    const on = await runSlow(q);
    expect(on).toEqual({ stolen: 0, errors: [] }); // acked under the renewed lease
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);

    const q2 = uniq("norenew");
    await lanes.queue(q2).push([{ data: "slow" }]);
    const off = await runSlow(q2, (b) => b.renewLease(false));
    expect(off.stolen).toBe(1); // the lease expired under the handler
    expect(off.errors[0]).toBeInstanceOf(AckError);
  });

  it("with no renewal options keeps a 3 s lease under a 7 s handler: handled once, acked, not redelivered", async () => {
    const lanes = client();
    const q = uniq("shortlease");
    await lanes.queue(q).config({ leaseTime: 3 }).create();
    await lanes.queue(q).push([{ data: "slow" }]);
    let handled = 0;
    const errors: unknown[] = [];
    const slow = lanes
      .queue(q)
      .limit(1)
      .onError((e) => errors.push(e))
      .consume(async () => {
        handled += 1;
        await sleep(7000);
      });
    await sleep(500);
    const other = lanes.queue(q).consume(() => {
      handled += 1;
    });
    await slow;
    await sleep(1000); // time for a redelivery, were the message released
    await other.stop();
    expect({ handled, errors }).toEqual({ handled: 1, errors: [] });
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
  }, 20_000);

  it("a stop with a pop in flight leaves nothing leased", async () => {
    const lanes = client();
    const q = uniq("inflight");
    const handled: unknown[] = [];
    const c = lanes
      .queue(q)
      .leaseSeconds(60)
      .timeoutMillis(3000)
      .consume((m) => void handled.push(m.data));
    await sleep(300); // the pop is parked on the broker
    await c.stop();
    await lanes.queue(q).push([{ data: "late" }]);
    const t0 = Date.now();
    const got = await lanes.queue(q).leaseSeconds(60).timeoutMillis(5000).pop();
    expect(got.map((m) => m.data)).toEqual(["late"]);
    expect(Date.now() - t0).toBeLessThan(4000); // not the 60 s lease of an abandoned pop
    expect(handled).toEqual([]);
  });

  it("done and error tell synchronously whether the consumer has ended and why", async () => {
    const lanes = client();
    const c = lanes.queue(uniq("state")).wait(false).consume(() => {});
    expect([c.done, c.error]).toEqual([false, undefined]);
    await c.stop();
    expect([c.done, c.error]).toEqual([true, undefined]);

    // A subscription mode the broker does not know is a 400: terminal for the loop.
    const bad = lanes.queue(uniq("state")).subscriptionMode("nonsense" as "all").wait(false).consume(() => {});
    expect(bad.done).toBe(false);
    await expect(bad.closed).rejects.toBeInstanceOf(BadRequestError);
    expect(bad.done).toBe(true);
    expect(bad.error).toBeInstanceOf(BadRequestError);
  });

  it("soft stop finishes the current message, acks it and releases the rest with retry", async () => {
    const lanes = client();
    const q = uniq("softstop");
    await lanes.queue(q).push([1, 2, 3].map((n) => ({ data: n })));
    const done: number[] = [];
    let started!: () => void;
    const first = new Promise<void>((r) => (started = r));
    const c = lanes
      .queue<number>(q)
      .batch(3)
      .consume(async (m) => {
        started();
        await sleep(500);
        done.push(m.data);
      });
    await first;
    await c.stop();
    expect(done).toEqual([1]);
    // 1 is acked; 2 and 3 were released (no lease left), so they come back at once
    const rest = await lanes.queue<number>(q).batch(5).wait(false).pop();
    expect(rest.map((m) => m.data)).toEqual([2, 3]);
    await c.stop(); // idempotent
  });

  it("hard stop aborts handler signals and releases the message without charging the budget", async () => {
    const lanes = client();
    const q = uniq("hardstop");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: "x" }]);
    let reason: unknown;
    let started!: () => void;
    const first = new Promise<void>((r) => (started = r));
    const c = lanes.queue(q).consume(
      (_m, { signal }) =>
        new Promise<void>((_resolve, reject) => {
          started();
          signal.addEventListener("abort", () => {
            reason = signal.reason;
            reject(signal.reason);
          });
        }),
    );
    await first;
    await c.stopAndCancel({ timeoutMillis: 5000 });
    expect(reason).toBeInstanceOf(ConsumerStoppedError);
    // retryLimit 0: a `failed` would have dead-lettered it; `retry` redelivers it
    const again = await lanes.queue(q).wait(false).pop();
    expect(again.map((m) => m.data)).toEqual(["x"]);
  });

  it("hard stop: a handler's own failure is nacked `failed` and reported, not released as the cancellation", async () => {
    const lanes = client();
    const q = uniq("hardfail");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: "poison" }]);
    const errors: unknown[] = [];
    let started!: () => void;
    const first = new Promise<void>((r) => (started = r));
    const c = lanes
      .queue(q)
      .reportHandlerErrors(true)
      .onError((e) => errors.push(e))
      .consume(async () => {
        started();
        await sleep(300); // ignores the signal
        throw new Error("real failure");
      });
    await first;
    await c.stopAndCancel({ timeoutMillis: 5000 });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(HandlerError);
    expect(((errors[0] as HandlerError).cause as Error).message).toBe("real failure");
    // retryLimit 0: the `failed` ack dead-letters it (a `retry` would have redelivered it)
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
    const page = await lanes.queue(q).dlq().limit(10).get();
    expect(page.messages.map((d) => d.data)).toEqual(["poison"]);
  });

  it("hard stop: an AbortError from an operation given the handler's signal is the cancellation (`retry`)", async () => {
    const lanes = client();
    const q = uniq("hardabort");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).push([{ data: "x" }]);
    const errors: unknown[] = [];
    let started!: () => void;
    const first = new Promise<void>((r) => (started = r));
    const c = lanes
      .queue(q)
      .reportHandlerErrors(true)
      .onError((e) => errors.push(e))
      .consume(async (_m, { signal }) => {
        started();
        await delay(10_000, undefined, { signal }); // rejects with an AbortError
      });
    await first;
    await c.stopAndCancel({ timeoutMillis: 5000 });
    expect(errors).toEqual([]);
    const again = await lanes.queue(q).wait(false).pop();
    expect(again.map((m) => m.data)).toEqual(["x"]);
  });

  it.each(["stop", "stopAndCancel"] as const)("%s() awaited inside a handler resolves at once; the consumer ends after that handler", async (how) => {
    const lanes = client();
    const q = uniq("selfstop");
    await lanes.queue(q).push([0, 1, 2].map((n) => ({ data: n })));
    const handled: number[] = [];
    let stopResolved = false;
    const c: Consumer = lanes
      .queue<number>(q)
      .batch(3)
      .consume(async (m) => {
        handled.push(m.data);
        await c[how]();
        stopResolved = true;
      });
    const ended = await Promise.race([c.closed.then(() => "ended"), sleep(5000).then(() => "still running after 5 s")]);
    expect(ended).toBe("ended");
    expect([stopResolved, handled]).toEqual([true, [0]]);
    // 0 is acked; 1 and 2 were released with retry, so they come back at once
    expect((await lanes.queue<number>(q).batch(5).wait(false).pop()).map((m) => m.data)).toEqual([1, 2]);
  });

  // The handler's scope follows its awaits, not only its synchronous start: a stop after a timer and a nested SDK call still comes from inside it.
  it.each(["consume", "consumeBatch"] as const)("%s: stop() awaited after the handler's own awaits (a timer, a nested pop) resolves at once; the consumer ends after that handler", async (how) => {
    const lanes = client();
    const q = uniq("selfstoplate");
    const other = uniq("selfstopother");
    await lanes.queue(q).partition("a").push([0, 1].map((n) => ({ data: n })));
    await lanes.queue(q).partition("b").push([2].map((n) => ({ data: n })));
    let calls = 0;
    let stopResolved = false;
    const handler = async () => {
      calls += 1;
      await delay(20);
      await lanes.queue(other).wait(false).pop();
      await c.stop();
      stopResolved = true;
    };
    const builder = lanes.queue<number>(q).batch(3).partitions(2);
    const c: Consumer = how === "consume" ? builder.consume(handler) : builder.consumeBatch(handler);
    const ended = await Promise.race([c.closed.then(() => "ended"), sleep(5000).then(() => "still running after 5 s")]);
    expect([ended, stopResolved, calls]).toEqual(["ended", true, 1]);
  });

  // As Go's TestITStopFromOnErrorOfARenewal, where Stop there waited for the end that waits for
  // that renewal. The handler acks its message itself, so the next renewal finds the lease gone.
  it("stop() called from onError on a failed lease renewal resolves without running out its timeout; the consumer ends", async () => {
    const lanes = client();
    const q = uniq("stoprenewal");
    await lanes.queue(q).push([{ data: "self" }]);
    let renewFailed = () => {};
    const failed = new Promise<void>((resolve) => (renewFailed = resolve));
    let firstError: unknown;
    let stopped: Promise<{ err?: unknown; took: number }> | undefined;
    let stopCalled = () => {};
    const called = new Promise<void>((resolve) => (stopCalled = resolve));
    const c: Consumer = lanes
      .queue(q)
      .wait(false)
      .leaseSeconds(5)
      .renewLease(true, 200)
      .onError((err) => {
        if (stopped) return;
        firstError = err;
        renewFailed();
        const start = Date.now();
        stopped = c.stop({ timeoutMillis: 3000 }).then(
          () => ({ took: Date.now() - start }),
          (err: unknown) => ({ err, took: Date.now() - start }),
        );
        stopCalled();
      })
      .consume(async (m) => {
        await lanes.ack(m, "completed");
        await failed;
      });
    expect(await Promise.race([called.then(() => "stop called"), sleep(10_000).then(() => "no renewal failed")])).toBe("stop called");
    expect(String(firstError)).toMatch(/renewal not applied/);
    const r = await stopped!;
    expect(r.err).toBeUndefined();
    expect(r.took, "stop from onError waited for the end that waits for it").toBeLessThan(1000);
    expect(await Promise.race([c.closed.then(() => "ended"), sleep(5000).then(() => "still running after 5 s")])).toBe("ended");
  });

  it("aborting the signal stops the consumer and `closed` resolves", async () => {
    const lanes = client();
    const q = uniq("abort");
    const ac = new AbortController();
    const c = lanes.queue(q).consume(() => {}, { signal: ac.signal });
    await sleep(200);
    ac.abort();
    await expect(c.closed).resolves.toBeUndefined();
  });

  it("consumeBatch hands each partition's slice at once", async () => {
    const lanes = client();
    const q = uniq("batchmode");
    await lanes.queue(q).push([1, 2, 3].map((n) => ({ data: n })));
    const slices: number[][] = [];
    await lanes
      .queue<number>(q)
      .batch(3)
      .limit(3)
      .consumeBatch((ms) => {
        slices.push(ms.map((m) => m.data));
      });
    expect(slices).toEqual([[1, 2, 3]]);
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
  });

  it("consumeBatch with limit(n) hands exactly n of a larger slice and releases the rest with retry", async () => {
    const lanes = client();
    const q = uniq("batchlimit");
    await lanes.queue(q).push(Array.from({ length: 10 }, (_, i) => ({ data: i })));
    const slices: number[][] = [];
    await lanes
      .queue<number>(q)
      .batch(10)
      .wait(false)
      .leaseSeconds(120)
      .limit(5)
      .consumeBatch((ms) => {
        slices.push(ms.map((m) => m.data));
      });
    expect(slices).toEqual([[0, 1, 2, 3, 4]]);
    // the other five were released with `retry` (no 120 s lease wait) and come next
    const rest = await lanes.queue<number>(q).batch(10).wait(false).pop();
    expect(rest.map((m) => m.data)).toEqual([5, 6, 7, 8, 9]);
  });

  it("for await over messages(): handled ones are acked, leaving releases the rest", async () => {
    const lanes = client();
    const q = uniq("iter");
    await lanes.queue(q).push([1, 2, 3, 4].map((n) => ({ data: n })));
    const got: Message<number>[] = [];
    for await (const m of lanes.queue<number>(q).batch(4).messages()) {
      got.push(m);
      if (got.length === 2) break;
    }
    expect(got.map((m) => m.data)).toEqual([1, 2]);
    // 1 acked, 2 released with retry: 2, 3, 4 come back
    const rest = await lanes.queue<number>(q).batch(5).wait(false).pop();
    expect(rest.map((m) => m.data)).toEqual([2, 3, 4]);
  });

  it("messages() with autoAck(false): every message handed over is the caller's; leaving releases nothing", async () => {
    const lanes = client();
    const q = uniq("iterown");
    await lanes.queue(q).push([1, 2, 3, 4].map((n) => ({ data: n })));
    const got: number[] = [];
    for await (const m of lanes.queue<number>(q).batch(4).leaseSeconds(1).autoAck(false).messages()) {
      got.push(m.data);
      await lanes.ack(m, "completed"); // the caller acks, e.g. inside a transaction
      if (got.length === 2) break;
    }
    expect(got).toEqual([1, 2]);
    // nothing released: 3 and 4 stay leased until the lease expires, then come back
    expect(await lanes.queue<number>(q).batch(5).wait(false).pop()).toEqual([]);
    await new Promise((r) => setTimeout(r, 1300));
    const rest = await lanes.queue<number>(q).batch(5).wait(false).pop();
    expect(rest.map((m) => m.data)).toEqual([3, 4]);
  });

  it("messages() ends after the builder's limit(n) and releases the rest of the pop with retry", async () => {
    const lanes = client();
    const q = uniq("iterlimit");
    await lanes.queue(q).push([1, 2, 3, 4, 5].map((n) => ({ data: n })));
    const guard = AbortSignal.timeout(5000); // an iteration that ignored the limit would run on
    const got: number[] = [];
    for await (const m of lanes.queue<number>(q).batch(5).leaseSeconds(120).timeoutMillis(300).limit(2).messages({ signal: guard })) got.push(m.data);
    expect(guard.aborted).toBe(false);
    expect(got).toEqual([1, 2]);
    // 1 and 2 acked; 3 released with `retry` (no 120 s lease wait), 4 and 5 behind it
    const rest = await lanes.queue<number>(q).batch(5).wait(false).pop();
    expect(rest.map((m) => m.data)).toEqual([3, 4, 5]);
  });

  it("messages() ends after the builder's idleMillis without a message", async () => {
    const lanes = client();
    const q = uniq("iteridle");
    await lanes.queue(q).push([{ data: 1 }]);
    const guard = AbortSignal.timeout(5000);
    const got: number[] = [];
    const t0 = Date.now();
    for await (const m of lanes.queue<number>(q).timeoutMillis(200).idleMillis(500).messages({ signal: guard })) {
      got.push(m.data);
      await sleep(700); // longer than idleMillis: the idle time starts when the next one is asked for
    }
    expect(guard.aborted).toBe(false);
    expect(got).toEqual([1]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1100);
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
  });

  it("messages() ends when its signal aborts", async () => {
    const lanes = client();
    const q = uniq("iterabort");
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const got: unknown[] = [];
    for await (const m of lanes.queue(q).messages({ signal: ac.signal })) got.push(m);
    expect(got).toEqual([]);
  });
});

describe("messages() renews the lease like the loop", () => {
  // A caller holding a message longer than its 1 s lease while a second consumer pops; returns what that consumer got and the iterator's errors.
  const holdSlowly = async (q: string, renew: (b: QueueBuilder) => QueueBuilder = (b) => b) => {
    const lanes = client();
    const errors: unknown[] = [];
    let stolen = -1;
    for await (const m of renew(lanes.queue(q)).wait(false).leaseSeconds(1).limit(1).onError((e) => errors.push(e)).messages()) {
      expect(m.data).toBe("slow");
      await sleep(1500);
      stolen = (await lanes.queue(q).wait(false).pop()).length;
      await sleep(1000);
    }
    return { stolen, errors };
  };

  it("by default: the message held past its lease is not popped by another consumer, and is acked", async () => {
    const lanes = client();
    const q = uniq("iterrenew");
    await lanes.queue(q).push([{ data: "slow" }]);
    expect(await holdSlowly(q)).toEqual({ stolen: 0, errors: [] });
    expect(await lanes.queue(q).wait(false).pop()).toEqual([]);
  });

  it("renewLease(false) turns it off: the lease expires under the caller", async () => {
    const lanes = client();
    const q = uniq("iternorenew");
    await lanes.queue(q).push([{ data: "slow" }]);
    const off = await holdSlowly(q, (b) => b.renewLease(false));
    expect(off.stolen).toBe(1);
    expect(off.errors[0]).toBeInstanceOf(AckError);
  });
});

describe("serverAutoAck(true): popped messages are committed", () => {
  const push = async (q: string, n: number) => {
    await client()
      .queue(q)
      .push(Array.from({ length: n }, (_, i) => ({ data: i })));
  };
  const left = async (q: string) => (await client().queue<number>(q).batch(20).wait(false).pop()).map((m) => m.data);

  it.each([1, 4])("the loop (concurrency %i) never pops more than is left of limit(n)", async (concurrency) => {
    const q = uniq("saalimit");
    await push(q, 10);
    const handled: number[] = [];
    await client()
      .queue<number>(q)
      .serverAutoAck(true)
      .batch(10)
      .concurrency(concurrency)
      .limit(3)
      .consume((m) => void handled.push(m.data));
    expect(handled).toEqual([0, 1, 2]);
    expect(await left(q)).toEqual([3, 4, 5, 6, 7, 8, 9]);
  });

  it("a limit above the broker's largest batch pops the automatic batch: the loop and the iterator run, not a 400", async () => {
    const q = uniq("saabiglimit");
    await push(q, 5);
    const handled: number[] = [];
    await client()
      .queue<number>(q)
      .serverAutoAck(true)
      .limit(20_000)
      .wait(false)
      .idleMillis(1000)
      .consume((m) => void handled.push(m.data));
    expect(handled).toEqual([0, 1, 2, 3, 4]);
    await push(q, 2);
    const got: number[] = [];
    for await (const m of client().queue<number>(q).serverAutoAck(true).limit(20_000).wait(false).idleMillis(1000).messages()) got.push(m.data);
    expect(got).toEqual([0, 1]);
  });

  it("the iterator never pops more than is left of limit(n)", async () => {
    const q = uniq("saaiterlimit");
    await push(q, 10);
    const got: number[] = [];
    for await (const m of client().queue<number>(q).serverAutoAck(true).batch(10).limit(3).messages()) got.push(m.data);
    expect(got).toEqual([0, 1, 2]);
    expect(await left(q)).toEqual([3, 4, 5, 6, 7, 8, 9]);
  });

  it("a soft stop still hands every message already popped to the handler", async () => {
    const q = uniq("saasoft");
    await push(q, 5);
    const handled: number[] = [];
    const errors: unknown[] = [];
    const c = client()
      .queue<number>(q)
      .serverAutoAck(true)
      .batch(5)
      .onError((e) => errors.push(e))
      .consume(async (m) => {
        handled.push(m.data);
        if (m.data === 0) void c.stop();
        await sleep(20);
      });
    await c.closed;
    expect(handled).toEqual([0, 1, 2, 3, 4]);
    expect(errors).toEqual([]);
  });

  it("a hard stop reports how many popped messages it dropped", async () => {
    const q = uniq("saahard");
    await push(q, 5);
    const handled: number[] = [];
    const errors: unknown[] = [];
    const c = client()
      .queue<number>(q)
      .serverAutoAck(true)
      .batch(5)
      .onError((e) => errors.push(e))
      .consume((m) => {
        handled.push(m.data);
        if (m.data === 1) void c.stopAndCancel();
      });
    await c.closed;
    expect(handled).toEqual([0, 1]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(AutoAckDroppedError);
    expect(errors[0]).toMatchObject({ count: 3 });
    expect(await left(q)).toEqual([]); // committed in the pop: gone
  });

  it("a soft stop lets a long-poll pop in flight answer and hands its messages over: the broker committed them", async () => {
    const q = uniq("saasoftinflight");
    const handled: number[] = [];
    const errors: unknown[] = [];
    const c = client()
      .queue<number>(q)
      .serverAutoAck(true)
      .timeoutMillis(5000)
      .onError((e) => errors.push(e))
      .consume((m) => void handled.push(m.data));
    await sleep(300); // the pop is parked on the empty queue
    const stopped = c.stop();
    await sleep(200);
    await push(q, 1);
    await stopped;
    expect(handled).toEqual([0]);
    expect(errors).toEqual([]);
    expect(await left(q)).toEqual([]); // committed in the pop, and handed over
  });

  /** countPopsInFlight is a fetch that counts the pop requests outstanding at once. */
  const countPopsInFlight = () => {
    const seen = { now: 0, max: 0 };
    const counting: typeof fetch = async (input, init) => {
      const isPop = String(input instanceof Request ? input.url : input).includes("/api/v1/pop");
      if (isPop) seen.max = Math.max(seen.max, ++seen.now);
      try {
        return await fetch(input, init);
      } finally {
        if (isPop) seen.now -= 1;
      }
    };
    return { seen, counting };
  };

  const pushToPartitions = async (q: string, partitions: number, each: number) => {
    for (let p = 0; p < partitions; p++)
      await client()
        .queue(q)
        .partition(`p${p}`)
        .push(Array.from({ length: each }, (_, i) => ({ data: p * each + i })));
  };

  const countLeft = async (q: string) => {
    let n = 0;
    for (;;) {
      const got = await client().queue(q).batch(100).wait(false).pop();
      if (got.length === 0) return n;
      n += got.length;
    }
  };

  it.each([undefined, 2])("limit 5, concurrency 4, batch %s over 4 partitions: exactly 5 handed over and committed", async (batch) => {
    const q = uniq("saalimit5");
    await pushToPartitions(q, 4, 10);
    const handled: number[] = [];
    let b = client().queue<number>(q).serverAutoAck(true).concurrency(4).limit(5).wait(false);
    if (batch !== undefined) b = b.batch(batch);
    await b.consume((m) => void handled.push(m.data));
    expect(handled).toHaveLength(5);
    expect(await countLeft(q)).toBe(35);
  });

  it("limit 300, concurrency 3, batch 50: workers pop side by side and exactly 300 are committed", async () => {
    const q = uniq("saalimit300");
    await pushToPartitions(q, 6, 60);
    const { seen, counting } = countPopsInFlight();
    const handled: number[] = [];
    await client({ fetch: counting })
      .queue<number>(q)
      .serverAutoAck(true)
      .concurrency(3)
      .batch(50)
      .limit(300)
      .consume(async (m) => {
        handled.push(m.data);
        await sleep(1);
      });
    expect(handled).toHaveLength(300);
    expect(new Set(handled).size).toBe(300);
    expect(seen.max).toBeGreaterThan(1);
    expect(await countLeft(q)).toBe(60);
  });

  it("an iterator left early reports how many popped messages it dropped; without onError as a warning", async () => {
    const q = uniq("saaiterleave");
    await push(q, 10);
    const errors: unknown[] = [];
    for await (const m of client().queue<number>(q).serverAutoAck(true).batch(5).onError((e) => errors.push(e)).messages()) if (m.data === 1) break;
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ count: 3 });

    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      for await (const m of client().queue<number>(q).serverAutoAck(true).batch(5).messages()) if (m.data === 5) break;
      expect(warn).toHaveBeenCalledTimes(1);
      expect(warn.mock.calls[0]![0]).toMatch(/^lanes: messages: stop: 4 message\(s\) popped with serverAutoAck\(true\) dropped unhandled/);
    } finally {
      warn.mockRestore();
    }
  });
});

describe('a queue or partition named "." or "..": InvalidNameError before anything is sent', () => {
  it.each<[string, string | undefined, "queue" | "partition"]>([
    [".", undefined, "queue"],
    ["..", undefined, "queue"],
    ["ok", ".", "partition"],
    ["ok", "..", "partition"],
    ["ok", "  ", "partition"],
  ])("queue %j, partition %j", async (queue, partition, field) => {
    const lanes = client();
    const b = partition === undefined ? lanes.queue(queue) : lanes.queue(queue).partition(partition);
    const named = { field, value: partition ?? queue };
    await expect(b.wait(false).pop()).rejects.toThrow(InvalidNameError);
    await expect(b.wait(false).pop()).rejects.toMatchObject(named);
    expect(() => b.consume(() => {})).toThrow(InvalidNameError);
    expect(() => b.consumeBatch(() => {})).toThrow(InvalidNameError);
    expect(() => b.messages()).toThrow(InvalidNameError);
  });
});

describe("a consumer group of only white space: InvalidNameError wherever a group is taken, before anything is sent", () => {
  it.each([" ", "\t\n", "\u3000"])("group %j", async (group) => {
    let sent = 0;
    const lanes = client({
      fetch: (input, init) => {
        sent += 1;
        return fetch(input, init);
      },
    });
    const q = uniq("blankgroup");
    const named = { field: "group", value: group };
    const msg = { transactionId: "t", partitionId: "00000000-0000-0000-0000-000000000000", consumerGroup: "g", leaseId: "" };
    for (const b of [lanes.queue(q), lanes.queue(q).partition("p"), lanes.queue().namespace(q)]) {
      const g = b.group(group).wait(false);
      await expect(g.pop()).rejects.toMatchObject(named);
      expect(() => g.consume(() => {})).toThrow(InvalidNameError);
      expect(() => g.consumeBatch(() => {})).toThrow(InvalidNameError);
      expect(() => g.messages()).toThrow(InvalidNameError);
    }
    await expect(lanes.ack(msg, "completed", { group })).rejects.toMatchObject(named);
    await expect(lanes.ack([msg, msg], "completed", { consumerGroup: group })).rejects.toMatchObject(named);
    expect(() => lanes.transaction().ack(msg, "completed", { group })).toThrow(InvalidNameError);
    await expect(lanes.queue(q).group(group).depth()).rejects.toMatchObject(named);
    await expect(lanes.queue(q).dlq(group).get()).rejects.toMatchObject(named);
    await expect(lanes.admin.getQueueDepth(q, group)).rejects.toMatchObject(named);
    await expect(lanes.admin.listDlq({ queue: q, consumerGroup: group })).rejects.toMatchObject(named);
    await expect(lanes.admin.purgeDlq(q, group)).rejects.toMatchObject(named);
    for (const g of [group, ""]) {
      const inPath = { field: "group", value: g };
      await expect(lanes.admin.seekConsumerGroup(g, q, { toEnd: true })).rejects.toMatchObject(inPath);
      await expect(lanes.admin.seekConsumerGroupPartition(g, q, "p", { toEnd: true })).rejects.toMatchObject(inPath);
      await expect(lanes.admin.getConsumerGroup(g)).rejects.toMatchObject(inPath);
      await expect(lanes.admin.deleteConsumerGroup(g)).rejects.toMatchObject(inPath);
      await expect(lanes.admin.deleteConsumerGroupForQueue(g, q)).rejects.toMatchObject(inPath);
      await expect(lanes.admin.updateSubscription(g, new Date())).rejects.toMatchObject(inPath);
    }
    expect(sent).toBe(0);
  });
});

/** EDGE_SPACE_NAMES sit on the edge of the broker's white-space rule (Go's unicode.IsSpace, Unicode's White_Space): trim() also strips U+FEFF, which the broker takes as a name, and keeps U+0085, which the broker counts as white space. */
const EDGE_SPACE_NAMES = [
  "\t", "\n", "\v", "\f", "\r", " ", "\x1c", "\x1d", "\x1e", "\x1f", "\u0085", "\u00a0", "\u1680", "\u180e",
  "\u2000", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", " \ufeff ", "\u0085\u3000",
];

describe("a blank group or partition name is what the broker calls blank", () => {
  it("refuses a name before sending exactly when a pop sent by hand gets 400 for it", async () => {
    const lanes = client();
    const q = uniq("blankrule");
    const queuePath = `${brokerUrl()}/api/v1/pop/queue/${encodeURIComponent(q)}`;
    const brokerRefuses = async (url: string) => {
      const answer = await fetch(url);
      await answer.body?.cancel();
      expect([204, 400]).toContain(answer.status);
      return answer.status === 400;
    };
    const sdkRefuses = async (pop: Promise<unknown>) => {
      try {
        await pop;
        return false;
      } catch (err) {
        if (err instanceof InvalidNameError) return true;
        if (err instanceof BadRequestError) return false; // sent, and the broker refused it
        throw err;
      }
    };
    const codePoints = (name: string) => [...name].map((c) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`).join(" ");
    const disagreements: string[] = [];
    let refused = 0;
    for (const name of EDGE_SPACE_NAMES) {
      const groupRefused = await brokerRefuses(`${queuePath}?wait=false&consumerGroup=${encodeURIComponent(name)}`);
      if (groupRefused !== (await sdkRefuses(lanes.queue(q).group(name).wait(false).pop()))) disagreements.push(`group ${codePoints(name)}`);
      const partitionRefused = await brokerRefuses(`${queuePath}/partition/${encodeURIComponent(name)}?wait=false`);
      if (partitionRefused !== (await sdkRefuses(lanes.queue(q).partition(name).wait(false).pop()))) disagreements.push(`partition ${codePoints(name)}`);
      if (groupRefused) refused += 1;
    }
    expect(disagreements).toEqual([]);
    expect(refused).toBeGreaterThan(0);
    expect(refused).toBeLessThan(EDGE_SPACE_NAMES.length);
  });
});

describe("LANES_CLIENT_LOG", () => {
  it("sends the debug and info lines to the console too when no logger is given; logger: null still silences everything", async () => {
    const debug = vi.spyOn(console, "debug").mockImplementation(() => undefined);
    const idleLine = (calls: unknown[][]) => calls.filter(([m]) => String(m).startsWith("lanes: consumer idle for"));
    try {
      const q = uniq("clientlog");
      await client({ env: { LANES_CLIENT_LOG: "true" } }).queue(q).idleMillis(200).consume(() => {});
      expect(idleLine(debug.mock.calls)).toHaveLength(1);

      debug.mockClear();
      await client({ env: {} }).queue(q).idleMillis(200).consume(() => {});
      await client({ env: { LANES_CLIENT_LOG: "true" }, logger: null }).queue(q).idleMillis(200).consume(() => {});
      expect(debug).not.toHaveBeenCalled();
    } finally {
      debug.mockRestore();
    }
  });
});
