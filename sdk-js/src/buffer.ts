// The optional client-side push buffer: bounded, flushed on count or time and on close(),
// failed flushes kept at the front and retried (never dropped, except items the broker
// refuses on their own).
import { once } from "node:events";
import { APIError, ClientClosedError, PushError, UnsentError, isTerminal } from "./errors.js";
import { checkNames } from "./names.js";
import { toWireItems, type Core, type PushItem, type toWireItem } from "./internal/core.js";
import { sleep } from "./internal/http.js";
import type { RequestOptions } from "./request-options.js";

/** BufferOptions size a push buffer (defaults: 100 messages, 1000 ms, maxSize 4 × messageCount, retry every 250 ms). */
export interface BufferOptions {
  /** messageCount flushes when this many items wait (default 100; 0 or below = the default). */
  messageCount?: number | undefined;
  /** timeMillis flushes this long after the first waiting item (default 1000; 0 flushes at once, where Go's zero FlushInterval is the default). */
  timeMillis?: number | undefined;
  /** maxSize bounds waiting items; `push` waits while the buffer is full (default 4 × messageCount; 0 or below = the default). */
  maxSize?: number | undefined;
  /** retryDelayMillis is the pause before retrying a failed flush (default 250; 0 or below = the default). */
  retryDelayMillis?: number | undefined;
  /** onError receives flush errors. Items the broker refuses (each alone on 400 or 413, or the batch on 403) are dropped and passed as `droppedItems` (wire items: `{queue, partition, payload, transactionId}`), all those of one flush in one call with the broker's answer to the first; otherwise `droppedItems` is empty and the items are retried. */
  onError?: ((err: unknown, droppedItems: unknown[]) => void) | undefined;
}

type WireItem = ReturnType<typeof toWireItem>;

/** Refused gathers the items one flush drops, so they are logged and reported once; `err` is the broker's answer to the first. */
interface Refused {
  err?: unknown;
  items: WireItem[];
}

/** PushBuffer batches pushes to one (queue, partition). Buffered is not sent: `flush()` or `lanes.close()` sends what waits. */
export class PushBuffer<T = unknown> {
  private items: WireItem[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private flushing: Promise<void> | undefined;
  private spaceWaiters: (() => void)[] = [];
  private readonly messageCount: number;
  private readonly timeMillis: number;
  private readonly maxSize: number;
  private readonly retryDelayMillis: number;
  private closing = false;
  /** stopped ends the flusher after close() gave up; flush() starts it again. */
  private stopped = false;
  /** cut aborts the flush in flight when close() gives up, so no request, retry or pause of it outlives close(): it held Node for up to three attempt timeouts, and could still send items close() had reported unsent. */
  private cut: AbortController | undefined;
  private force = false;
  /** flushes counts completed flush requests. */
  flushes = 0;

  /** @internal throws InvalidNameError for a name the broker refuses, so the buffer never fills with items it could only drop. */
  constructor(
    private readonly core: Core,
    readonly queue: string,
    readonly partition: string | undefined,
    private readonly opts: BufferOptions,
  ) {
    checkNames("buffer", queue, partition);
    // 0 or below takes the default, as Go's zero value and Python do: a count of 0 sent every item alone, a delay of 0 retried a failing flush every millisecond.
    this.messageCount = positiveOr(opts.messageCount, 100);
    this.timeMillis = Math.max(0, opts.timeMillis ?? 1000);
    this.maxSize = positiveOr(opts.maxSize, 4 * this.messageCount);
    this.retryDelayMillis = positiveOr(opts.retryDelayMillis, 250);
  }

  /** size is the number of items waiting. */
  get size(): number {
    return this.items.length;
  }

  /** push enqueues items (ids minted now, so a retried flush deduplicates), all or nothing; it waits while the buffer is full. An item that cannot be sent as given throws InvalidItemError before anything is enqueued; a payload is sent as it was at the push; after `lanes.close()` it throws ClientClosedError. Aborting `signal` before the items are enqueued rejects with its reason and enqueues none of them, so pushing them again stores them once; the buffer's flush goes on. */
  async push(items: PushItem<T>[], opts: RequestOptions = {}): Promise<{ buffered: true; count: number }> {
    const wire = toWireItems(this.queue, this.partition, items);
    // Keep each payload's JSON as it is now (as Go and Python keep their encoding): the caller may
    // change the object before the flush, and a change JSON cannot hold would fail every flush.
    for (const w of wire) w.payload = JSON.parse(JSON.stringify(w.payload)) as typeof w.payload;
    for (;;) {
      if (this.closing) throw new ClientClosedError(`buffer ${this.queue}/${this.partition ?? "Default"}: client is closed`);
      opts.signal?.throwIfAborted();
      if (this.items.length === 0 || this.items.length + wire.length <= this.maxSize) break;
      this.kick(true);
      await this.roomOrAbort(opts.signal);
    }
    this.items.push(...wire);
    if (this.items.length >= this.messageCount) this.kick();
    else if (!this.timer && !this.flushing) {
      this.timer = setTimeout(() => this.kick(true), this.timeMillis);
      this.timer.unref?.();
    }
    return { buffered: true, count: wire.length };
  }

  /** roomOrAbort resolves when a flush made room, or when `signal` aborts (the caller's loop then throws its reason); either way it leaves no waiter or listener behind. */
  private roomOrAbort(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      const onRoom = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        this.spaceWaiters = this.spaceWaiters.filter((w) => w !== onRoom);
        resolve();
      };
      this.spaceWaiters.push(onRoom);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** flush sends everything waiting now and resolves when it is sent (or dropped because the broker refuses it). It rejects with UnsentError (`.unsent`) when `timeoutMillis` (default 30 s, as Python's `flush()`) runs out first, the items staying buffered, or if `lanes.close()` gives up meanwhile. Aborting `signal` rejects with its reason at once and only ends this wait: the flush it started goes on in the background, as it would past the timeout. */
  async flush(opts: { timeoutMillis?: number | undefined } & RequestOptions = {}): Promise<void> {
    const left = await this.flushUntil(Date.now() + (opts.timeoutMillis ?? 30_000), opts.signal);
    if (left > 0) throw new UnsentError(left);
  }

  /** @internal flushes until everything is sent or the deadline passes, or rejects with the signal's reason once it aborts; returns how many items are left. Neither cuts the flush: the flusher goes on retrying, since every push to this buffer rides on it. */
  async flushUntil(deadline: number, signal?: AbortSignal): Promise<number> {
    signal?.throwIfAborted();
    // The deadline's timer and the abort listener go once the flush wins, or they alone would keep Node running.
    const flushed = new AbortController();
    try {
      const waits: Promise<unknown>[] = [this.drain().catch(() => undefined)];
      if (Number.isFinite(deadline)) waits.push(sleep(Math.max(0, deadline - Date.now()), flushed.signal).catch(() => undefined));
      if (signal) {
        const aborted = once(signal, "abort", { signal: flushed.signal }).then(
          () => Promise.reject(signal.reason as Error),
          () => undefined,
        );
        waits.push(aborted);
      }
      await Promise.race(waits);
    } finally {
      flushed.abort();
    }
    return this.items.length;
  }

  private async drain(): Promise<void> {
    this.stopped = false;
    while (this.items.length > 0 || this.flushing) {
      if (this.stopped) throw new UnsentError(this.items.length);
      this.kick(true);
      await this.flushing;
    }
  }

  /** @internal refuses new pushes, flushes until the deadline or the signal's abort (then it rejects with the reason), then ends the flusher; returns how many items are left. */
  async close(deadline: number, signal?: AbortSignal): Promise<number> {
    this.closing = true;
    this.wake();
    try {
      await this.flushUntil(deadline, signal);
    } finally {
      // Given up (time or abort): what is left stays buffered for a later close().
      this.stopped = this.items.length > 0;
      if (this.stopped) this.cut?.abort(new UnsentError(this.items.length));
    }
    return this.items.length;
  }

  private kick(force = false): void {
    if (force) this.force = true;
    if (!this.force && this.items.length < this.messageCount) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.flushing) {
      this.flushing = this.run().finally(() => {
        this.flushing = undefined;
        if (this.items.length > 0 && !this.timer && !this.stopped) {
          this.timer = setTimeout(() => this.kick(true), this.items.length >= this.messageCount || this.closing ? 0 : this.timeMillis);
          this.timer.unref?.();
        }
      });
    }
  }

  private wake(): void {
    const w = this.spaceWaiters;
    this.spaceWaiters = [];
    for (const f of w) f();
  }

  private async run(): Promise<void> {
    const cut = new AbortController();
    this.cut = cut;
    let dropped: Refused = { items: [] };
    // A run close() cut ends here, even if a later flush or close() has cleared `stopped` meanwhile:
    // its sends fail at once on the aborted signal, so looping on would spin without yielding.
    while (!cut.signal.aborted && !this.stopped && (this.items.length >= this.messageCount || (this.force && this.items.length > 0))) {
      const chunk = this.items.slice(0, this.messageCount);
      const sent = await this.send(chunk, dropped, cut.signal);
      this.items.splice(0, chunk.length, ...sent.keep);
      this.wake();
      if (sent.failed) {
        this.reportDropped(dropped);
        dropped = { items: [] };
        await sleep(this.retryDelayMillis, cut.signal).catch(() => undefined);
        continue;
      }
      this.flushes += 1;
    }
    this.reportDropped(dropped);
    this.force = false;
  }

  private reportDropped(dropped: Refused): void {
    if (dropped.items.length > 0) this.report(dropped.err, dropped.items);
  }

  /** send pushes batch and returns the items to keep at the front for a retry. The buffer built the batch, so one the broker refuses as a whole (413, or a 400 for several items) is halved until each refused item is alone; only those are dropped (added to `dropped`). */
  private async send(batch: WireItem[], dropped: Refused, signal: AbortSignal): Promise<{ keep: WireItem[]; failed: boolean }> {
    try {
      await this.core.pushWire(batch, signal);
      return { keep: [], failed: false };
    } catch (err) {
      // Cut by close(): kept for a later flush (the same transaction ids deduplicate it).
      if (signal.aborted) return { keep: batch, failed: true };
      if (err instanceof PushError) {
        // Keep only the failed items, at the front, and retry them.
        const failed = new Set(err.failed.map((r) => r.index));
        this.report(err, []);
        return { keep: batch.filter((_, i) => failed.has(i)), failed: true };
      }
      const status = err instanceof APIError ? err.status : 0;
      if (batch.length > 1 && (status === 400 || status === 413)) {
        const half = Math.floor(batch.length / 2);
        const first = await this.send(batch.slice(0, half), dropped, signal);
        if (first.failed) return { keep: [...first.keep, ...batch.slice(half)], failed: true };
        return this.send(batch.slice(half), dropped, signal);
      }
      if (isTerminal(err) || status === 400) {
        dropped.err ??= err;
        dropped.items.push(...batch);
        return { keep: [], failed: false };
      }
      this.report(err, []);
      return { keep: batch, failed: true };
    }
  }

  private report(err: unknown, dropped: WireItem[]): void {
    const what = `buffer ${this.queue}/${this.partition ?? "Default"}: flush failed: ${err instanceof Error ? err.message : String(err)}`;
    if (dropped.length > 0) {
      // Lost messages are never silent: without a logger this goes to the console.
      this.core.log.error(`${what} (${dropped.length} item(s) dropped)`, { transactionIds: dropped.map((d) => d.transactionId) });
    } else {
      this.core.log.warn(what);
    }
    try {
      this.opts.onError?.(err, dropped);
    } catch {
      // never let a callback break the flusher
    }
  }
}

/** positiveOr is n when it is a number above 0, else the default. */
function positiveOr(n: number | undefined, fallback: number): number {
  return n !== undefined && n > 0 ? n : fallback;
}
