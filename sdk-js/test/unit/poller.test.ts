// The long poll of a pop with idle time left is cut to it, rounded up to whole milliseconds so it never becomes 0 (which would not wait at all); a pop that does not park, or one without an idle deadline, keeps the builder's timeout (docs/consuming.md §3).
import { describe, expect, it, vi } from "vitest";
import { outagePause } from "../../src/consumer.js";
import { APIConnectionError, InternalServerError, RateLimitError } from "../../src/errors.js";
import type { PopResult } from "../../src/message.js";
import { Poller, type PopSource } from "../../src/poller.js";
import { DEFAULT_QUEUE_STATE, type QueueState } from "../../src/queue.js";

/** sentTimeout pops once through a Poller whose idle deadline stays idleLeftMillis ahead (none when undefined) and returns the maxTimeoutMillis that pop was given (undefined: no pop was sent). */
async function sentTimeout(s: Partial<QueueState>, idleLeftMillis: number | undefined): Promise<number | undefined> {
  let sent: number | undefined;
  const source: PopSource<unknown> = {
    popResult(opts): Promise<PopResult<unknown>> {
      sent = opts.maxTimeoutMillis;
      return Promise.resolve({ messages: [], leaseId: "", consumerGroup: "", partitionsClaimed: 0 });
    },
  };
  const poller = new Poller(source, { ...DEFAULT_QUEUE_STATE, queue: "q", timeoutMillis: 5000, ...s }, undefined, () => undefined);
  await poller.next(
    () => false,
    () => true,
    idleLeftMillis === undefined ? undefined : () => Date.now() + idleLeftMillis,
  );
  return sent;
}

describe("a pop's long poll and the idle time left", () => {
  it("is cut to the idle time left, rounded up to whole milliseconds", async () => {
    expect(await sentTimeout({}, 300)).toBe(300);
    expect(await sentTimeout({}, 299.2)).toBe(300);
    expect(await sentTimeout({}, 60_000)).toBe(5000);
  });

  it("is never 0 while idle time is left", async () => {
    expect(await sentTimeout({}, 0.3)).toBe(1);
  });

  it("is not sent once no idle time is left", async () => {
    expect(await sentTimeout({}, -1)).toBeUndefined();
  });

  it("is the builder's without an idle deadline, without wait, or with timeout 0", async () => {
    expect(await sentTimeout({}, undefined)).toBe(5000);
    expect(await sentTimeout({ wait: false }, 300)).toBe(5000);
    expect(await sentTimeout({ timeoutMillis: 0 }, 300)).toBe(0);
  });
});

describe("a failed pop's backoff and the idle time left", () => {
  it("ends the loop once the clock passes the idle deadline, not when a timer fires a few ms short of it, and says so", async () => {
    // Date.now() here runs at a tenth of real time: every timer fires with the clock short of its end.
    const start = Date.now();
    const realNow = Date.now.bind(Date);
    const now = vi.spyOn(Date, "now").mockImplementation(() => start + (realNow() - start) / 10);
    try {
      let pops = 0;
      const source: PopSource<unknown> = {
        popResult(): Promise<PopResult<unknown>> {
          pops += 1;
          return Promise.reject(new InternalServerError({ status: 503, code: "database_unavailable", message: "down", body: undefined }));
        },
      };
      const poller = new Poller(source, { ...DEFAULT_QUEUE_STATE, queue: "q", timeoutMillis: 5000 }, undefined, () => undefined);
      const got = await poller.next(
        () => pops >= 3,
        undefined,
        () => start + 30,
      );
      expect({ got, pops, idleEnded: poller.idleEnded, clockPastDeadline: Date.now() >= start + 30 }).toEqual({
        got: undefined,
        pops: 1,
        idleEnded: true,
        clockPastDeadline: true,
      });
    } finally {
      now.mockRestore();
    }
  });

  it("pops again when the backoff ends first, idle time still left", async () => {
    let pops = 0;
    const source: PopSource<unknown> = {
      popResult(): Promise<PopResult<unknown>> {
        pops += 1;
        return pops === 1
          ? Promise.reject(new InternalServerError({ status: 503, code: "database_unavailable", message: "down", body: undefined }))
          : Promise.resolve({ messages: [], leaseId: "", consumerGroup: "", partitionsClaimed: 0 });
      },
    };
    const poller = new Poller(source, { ...DEFAULT_QUEUE_STATE, queue: "q", timeoutMillis: 5000 }, undefined, () => undefined);
    const started = Date.now();
    const got = await poller.next(() => false, () => true, () => started + 60_000);
    expect({ got, pops, idleEnded: poller.idleEnded }).toEqual({ got: undefined, pops: 2, idleEnded: false });
    expect(Date.now() - started).toBeGreaterThanOrEqual(990); // the first failed pop's 1 s backoff
  });
});

describe("outagePause: the wait after a pop whose handlers failed for want of a broker", () => {
  const limited = (retryAfter: number | undefined) => new RateLimitError({ status: 429, code: "rate_limited", message: "busy", body: undefined, retryAfter });
  const refused = new APIConnectionError("refused", { attempts: 1, url: "http://127.0.0.1:1" });
  it.each([
    { name: "a 429's Retry-After in full, whatever the streak", failures: [limited(3000)], streak: 3, want: 3000 },
    { name: "a 429 without a hint: 1 s", failures: [limited(undefined)], streak: 3, want: 1000 },
    { name: "a 429 wrapped as a cause", failures: [new Error("commit", { cause: limited(2500) })], streak: 0, want: 2500 },
    { name: "no answer: the doubling backoff", failures: [refused], streak: 2, want: 4000 },
    { name: "the longest of a pop's failures", failures: [refused, limited(2500)], streak: 0, want: 2500 },
  ])("$name", ({ failures, streak, want }) => {
    expect(outagePause(failures, streak)).toBe(want);
  });
});
