// A per-attempt timeout of 0 sets none (docs/retries.md §1), as in sdk-go and sdk-python: an
// attempt waits past the 30 s default (on a fake clock) and is answered by the real broker.
import { describe, expect, it, vi } from "vitest";
import { Lanes } from "../../src/index.js";
import { brokerUrl, uniq } from "./helpers.js";

describe("timeoutMillis", () => {
  it("0 sets no per-attempt timeout: an attempt held past 30 s is not cut", async () => {
    let calls = 0;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    // Holds every attempt until the gate opens (or its signal aborts it), then goes out for real.
    const held: typeof fetch = async (input, init) => {
      calls += 1;
      await new Promise<void>((resolve, reject) => {
        init?.signal?.addEventListener("abort", () => reject(init.signal?.reason as Error), { once: true });
        void gate.then(resolve);
      });
      return fetch(input, init);
    };
    const c = new Lanes({ url: brokerUrl(), env: {}, timeoutMillis: 0, retryDelayMillis: 10, fetch: held });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const pushed = c.queue(uniq("timeout0")).push([{ data: 1 }]);
      pushed.catch(() => {}); // awaited below, once the clock has moved
      await vi.advanceTimersByTimeAsync(60_000);
      vi.useRealTimers();
      open();
      const res = await pushed;
      expect(res[0]?.status).toBe("queued");
      expect(calls, "one attempt").toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it.each([-1, Number.NaN, Number.POSITIVE_INFINITY])("%s is refused when the client is built", (v) => {
    expect(() => new Lanes({ url: brokerUrl(), env: {}, timeoutMillis: v })).toThrow(/timeoutMillis must be a non-negative number/);
  });
});
