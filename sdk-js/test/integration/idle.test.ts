// Time spent on pops that fail counts as idle (docs/consuming.md §3): with no broker to answer,
// idleMillis ends the iterator and the consume loop quietly, each failure reported, and the 1 s
// error backoff is cut at the idle deadline rather than slept out (the same case as sdk-go and sdk-python).
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { Lanes } from "../../src/index.js";

/** closedPortUrl is a local URL nobody listens on: connecting to it is refused. */
async function closedPortUrl(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const addr = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  if (addr === null || typeof addr === "string") throw new Error("no port");
  return `http://127.0.0.1:${addr.port}`;
}

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
