// Time spent on pops that fail counts as idle (docs/consuming.md §3): with no broker to answer,
// idleMillis ends the iterator and the consume loop quietly, each failure reported, and the 1 s
// error backoff is cut at the idle deadline rather than slept out (the same case as sdk-go and sdk-python).
import { describe, expect, it } from "vitest";
import { Lanes, type QueueBuilder } from "../../src/index.js";
import { client, closedPortUrl, uniq } from "./helpers.js";

const IDLE_MILLIS = 300;

describe("idle while every pop fails", () => {
  it("the iterator ends quietly once idleMillis has passed", async () => {
    const lanes = new Lanes({ url: await closedPortUrl(), env: {}, retryAttempts: 0 });
    const errors: unknown[] = [];
    const signal = AbortSignal.timeout(10_000);
    const started = Date.now();
    for await (const m of lanes.queue("q").idleMillis(IDLE_MILLIS).onError((e) => errors.push(e)).messages({ signal })) {
      expect.fail(`handed over ${String(m)}`);
    }
    const took = Date.now() - started;
    expect(signal.aborted, "the iteration ended only with the test's signal").toBe(false);
    expect(took).toBeGreaterThanOrEqual(IDLE_MILLIS - 5);
    expect(took).toBeLessThan(IDLE_MILLIS + 500);
    expect(errors.length).toBeGreaterThanOrEqual(1);
  });

  it("the consume loop stops quietly once idleMillis has passed", async () => {
    const lanes = new Lanes({ url: await closedPortUrl(), env: {}, retryAttempts: 0 });
    const errors: unknown[] = [];
    const started = Date.now();
    const consumer = lanes
      .queue("q")
      .idleMillis(IDLE_MILLIS)
      .onError((e) => errors.push(e))
      .consume(() => undefined);
    const timedOut = Symbol("timedOut");
    const ended = await Promise.race([consumer.then(() => "ended"), new Promise((r) => setTimeout(() => r(timedOut), 5000))]);
    expect(ended).toBe("ended");
    expect(Date.now() - started).toBeLessThan(IDLE_MILLIS + 1000);
    expect(errors.length).toBeGreaterThanOrEqual(1);
  });
});

/** recordingPopTimeouts is a fetch to the real broker that records the long-poll timeout (ms) of every pop. */
function recordingPopTimeouts(): { timeouts: number[]; fetch: typeof fetch } {
  const timeouts: number[] = [];
  return {
    timeouts,
    fetch: (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (url.pathname.includes("/pop/")) timeouts.push(Number(url.searchParams.get("timeout")));
      return fetch(input, init);
    },
  };
}

const LONG_POLL_MILLIS = 5000;
const MOMENT_MILLIS = 700;

/** expectEndedAtIdleDeadline wants the run started at `started` to have ended within a moment of its idle deadline, every pop's long poll cut to the idle time left and still waiting. */
function expectEndedAtIdleDeadline(started: number, timeouts: number[]): void {
  const took = Date.now() - started;
  expect(took).toBeGreaterThanOrEqual(IDLE_MILLIS - 5);
  expect(took).toBeLessThan(IDLE_MILLIS + MOMENT_MILLIS);
  expect(timeouts.length).toBeGreaterThan(0);
  for (const t of timeouts) expect(t).toBeGreaterThan(0);
  for (const t of timeouts) expect(t).toBeLessThanOrEqual(IDLE_MILLIS);
}

// An idle timeout shorter than the long poll ends the iterator and the consume loop within a moment of its deadline (docs/consuming.md §3): each pop waits at most the idle time left, not its whole timeout. Before, an empty queue's long poll of 5 s ran out first.
describe("an idle timeout shorter than the long poll", () => {
  const shapes: [string, (b: QueueBuilder<unknown>) => QueueBuilder<unknown>][] = [
    ["plain", (b) => b],
    ["server auto-ack", (b) => b.serverAutoAck(true)],
  ];

  it.each(shapes)("ends the iterator at its deadline: %s", async (_name, shape) => {
    const rec = recordingPopTimeouts();
    const b = shape(client({ fetch: rec.fetch }).queue(uniq("idlecut")).timeoutMillis(LONG_POLL_MILLIS).idleMillis(IDLE_MILLIS));
    const started = Date.now();
    for await (const m of b.messages()) expect.fail(`handed over ${String(m)}`);
    expectEndedAtIdleDeadline(started, rec.timeouts);
  });

  it.each([...shapes, ["three workers", (b: QueueBuilder<unknown>) => b.concurrency(3)] as const])("stops the consume loop at its deadline: %s", async (_name, shape) => {
    const rec = recordingPopTimeouts();
    const b = shape(client({ fetch: rec.fetch }).queue(uniq("idlecut")).timeoutMillis(LONG_POLL_MILLIS).idleMillis(IDLE_MILLIS));
    const started = Date.now();
    await b.consume(() => undefined);
    expectEndedAtIdleDeadline(started, rec.timeouts);
  });

  it("without an idle timeout, each long poll is the builder's timeout", async () => {
    const rec = recordingPopTimeouts();
    const b = client({ fetch: rec.fetch }).queue(uniq("idlecut")).timeoutMillis(400);
    for await (const m of b.messages({ signal: AbortSignal.timeout(1000) })) expect.fail(`handed over ${String(m)}`);
    expect(rec.timeouts.length).toBeGreaterThan(0);
    for (const t of rec.timeouts) expect(t).toBe(400);
  });
});
