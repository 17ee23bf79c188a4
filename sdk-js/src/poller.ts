// The pop loop shared by the consume loop and the message iterator (docs/consuming.md §3–§4).
import { APIConnectionError, InternalServerError, RateLimitError, UnexpectedAnswerError } from "./errors.js";
import { sleep } from "./internal/http.js";
import type { PopCut } from "./internal/popcut.js";
import type { PopResult } from "./message.js";
import type { QueueState } from "./queue.js";

/** PopSource is what a poller pops from (a queue builder); `cut`, when given, half-closes the pop at the loop's stop (popcut.ts). */
export interface PopSource<T> {
  popResult(opts: { signal?: AbortSignal | undefined; maxBatch?: number | undefined; maxTimeoutMillis?: number | undefined; cut?: PopCut | undefined }): Promise<PopResult<T>>;
}

/** withBatchCap is `source` with every pop's batch capped at `reserve()`, which is called just before the pop; `settle(reserved, got)` then hears how many messages came (0 when the pop failed). */
export function withBatchCap<T>(source: PopSource<T>, reserve: () => number, settle: (reserved: number, got: number) => void = () => undefined): PopSource<T> {
  return {
    async popResult(opts) {
      const reserved = reserve();
      let got = 0;
      try {
        const res = await source.popResult({ ...opts, maxBatch: reserved });
        got = res.messages.length;
        return res;
      } finally {
        settle(reserved, got);
      }
    },
  };
}

/** isTransientLoopError: 429 (after the policy), network failures, 5xx and a 2xx the SDK cannot use (a proxy's page: UnexpectedAnswerError) keep a loop going; everything else ends it (docs/consuming.md §4). */
export function isTransientLoopError(err: unknown): boolean {
  return err instanceof RateLimitError || err instanceof APIConnectionError || err instanceof InternalServerError || err instanceof UnexpectedAnswerError;
}

/** parks says whether the broker holds a pop until a message arrives: timeout 0 answers at once, so a loop pauses between empty pops as without wait. */
function parks(s: Pick<QueueState, "wait" | "timeoutMillis">): boolean {
  return s.wait && s.timeoutMillis > 0;
}

/** emptyPollPause is the pause after an empty pop that did not park: the broker's `waitMs` advice from the last echo when it is above 0, else 100 ms. The broker echoes only on a 200, where `waitMs` is 0 (its advice is for empty pops), so 0 means "no advice", not "do not pause" (as in Go). */
function emptyPollPause(waitMs: number | undefined): number {
  return waitMs !== undefined && waitMs > 0 ? waitMs : 100;
}

/** FAST_EMPTY_FIRST_PAUSE_MILLIS and FAST_EMPTY_MAX_PAUSE_MILLIS bound the pause after a waiting pop that answered empty at once (docs/consuming.md §3 step 2). */
const FAST_EMPTY_FIRST_PAUSE_MILLIS = 100;
const FAST_EMPTY_MAX_PAUSE_MILLIS = 2000;

/** answeredFast: a waiting pop that came back empty within a tenth of the timeout it sent did not park (a proxy, or a broker that answers long polls at once), so the loop must pace itself. */
function answeredFast(sentTimeoutMillis: number, tookMillis: number): boolean {
  return tookMillis < sentTimeoutMillis / 10;
}

/** loopErrorDelay is the pause after a failed pop the loop waits out: the 429's hint (or 1 s), else 1 s doubling per consecutive failure up to 30 s. A 429 is not counted among those failures (docs/consuming.md §4): the broker answered and said how long to wait. */
export function loopErrorDelay(err: unknown, consecutive: number): number {
  if (err instanceof RateLimitError) return err.retryAfter ?? 1000;
  return errorBackoff(consecutive);
}

/** errorBackoff is the loop's wait (ms) after `consecutive` failures in a row: min(1 s × 2^consecutive, 30 s). */
export function errorBackoff(consecutive: number): number {
  return Math.min(1000 * 2 ** consecutive, 30_000);
}

/** Poller pops until an answer holds messages: failed pops that the loop waits out go to `report` and are backed off, empty answers are paced unless the pop parks, and a waiting pop that answered empty at once is paced too (100 ms doubling to 2 s). */
export class Poller<T> {
  /** errors counts consecutive failed pops, 429s aside (loopErrorDelay). */
  private errors = 0;
  private waitMs: number | undefined;
  /** fastEmpties counts consecutive waiting pops that answered empty at once. */
  private fastEmpties = 0;
  /** idleEnded says the last `next` ended because its idle deadline passed (by the clock). */
  idleEnded = false;

  constructor(
    private readonly source: PopSource<T>,
    private readonly s: QueueState,
    private readonly signal: AbortSignal | undefined,
    private readonly report: (err: unknown) => void,
    /** pops, when given, says what ends the pops instead of `signal`, which then only cuts the pauses between them: an abort of `pops.signal`, or `pops.cut` (popcut.ts), which `signal`'s abort fires: it half-closes the pop in flight. */
    private readonly pops: { signal?: AbortSignal | undefined; cut?: PopCut | undefined } = { signal },
  ) {}

  /** next resolves to the next pop with messages, or to undefined once `stopped()` is true, `stopOnEmpty()` is true after an empty answer, or `idleDeadline()` (epoch ms) has passed before a pop, after an empty answer or a failed pop; it rejects with the error that ends the loop (403, 413, other 4xx, 501). Each long poll waits at most the idle time left, so it does not outlast the idle deadline, and failed pops count as idle (docs/consuming.md §3): the error backoff is cut at the idle deadline too. */
  async next(stopped: () => boolean, stopOnEmpty?: () => boolean, idleDeadline?: () => number): Promise<PopResult<T> | undefined> {
    const idleLeft = () => (idleDeadline === undefined ? Infinity : idleDeadline() - Date.now());
    this.idleEnded = false;
    const idle = (): undefined => {
      this.idleEnded = true;
      return undefined;
    };
    while (!stopped()) {
      let res: PopResult<T>;
      const left = idleLeft();
      if (left <= 0) return idle(); // idle already: a pop now would only wait past the deadline
      // Cut to whole milliseconds (the wire's unit) rounded up, so never 0, which would not wait at all.
      const timeoutMillis = parks(this.s) ? Math.min(this.s.timeoutMillis, Math.ceil(left)) : this.s.timeoutMillis;
      const startedAt = Date.now();
      try {
        res = await this.pop(timeoutMillis);
      } catch (err) {
        if (stopped()) return undefined;
        if (!isTransientLoopError(err)) throw err;
        this.report(err);
        const delay = loopErrorDelay(err, this.errors);
        if (!(err instanceof RateLimitError)) this.errors += 1;
        // Wait out the backoff or the idle time, whichever ends first by the clock: a timer may
        // fire a few ms before Date.now() reaches its end (Node measures timers from the event
        // loop's cached time), and a pop sent in those ms, or an idle end the caller cannot see on
        // the clock, would be one pop too many.
        const backoffEnd = Date.now() + delay;
        for (;;) {
          if (stopped()) return undefined;
          const idleLeftNow = idleLeft();
          if (idleLeftNow <= 0) return idle();
          const backoffLeft = backoffEnd - Date.now();
          if (backoffLeft <= 0) break;
          await this.pause(Math.min(idleLeftNow, backoffLeft));
        }
        continue;
      }
      this.errors = 0;
      if (res.autopilot?.waitMs !== undefined) this.waitMs = res.autopilot.waitMs;
      if (res.messages.length > 0) {
        this.fastEmpties = 0;
        return res;
      }
      if (stopOnEmpty?.()) return undefined;
      if (idleLeft() <= 0) return idle();
      if (!parks(this.s)) await this.pause(emptyPollPause(this.waitMs));
      else if (answeredFast(timeoutMillis, Date.now() - startedAt)) {
        await this.pause(Math.min(FAST_EMPTY_FIRST_PAUSE_MILLIS * 2 ** this.fastEmpties, FAST_EMPTY_MAX_PAUSE_MILLIS));
        this.fastEmpties += 1;
      } else this.fastEmpties = 0;
    }
    return undefined;
  }

  private async pop(maxTimeoutMillis: number): Promise<PopResult<T>> {
    const { signal, cut } = this.pops;
    if (!cut) return this.source.popResult({ signal, maxTimeoutMillis });
    const stop = () => cut.fire(this.signal?.reason);
    this.signal?.addEventListener("abort", stop, { once: true });
    if (this.signal?.aborted) stop();
    try {
      return await this.source.popResult({ signal, maxTimeoutMillis, cut });
    } finally {
      this.signal?.removeEventListener("abort", stop);
    }
  }

  private async pause(ms: number): Promise<void> {
    try {
      await sleep(ms, this.signal);
    } catch {
      // aborted: the loop is stopping
    }
  }
}
