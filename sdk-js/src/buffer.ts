// The optional client-side push buffer: bounded, flushed on count or time and on close(),
// failed flushes kept at the front and retried (never dropped, except terminal errors).
import { APIError, PushError, isTerminal } from "./errors.js";
import { toWireItems, type Core, type PushItem, type toWireItem } from "./internal/core.js";
import { sleep } from "./internal/http.js";

/** BufferOptions size a push buffer (defaults: 100 messages, 1000 ms, maxSize 4 × messageCount, retry every 250 ms). */
export interface BufferOptions {
  /** messageCount flushes when this many items wait (default 100). */
  messageCount?: number;
  /** timeMillis flushes this long after the first waiting item (default 1000). */
  timeMillis?: number;
  /** maxSize bounds waiting items; `push` waits while the buffer is full (default 4 × messageCount). */
  maxSize?: number;
  /** retryDelayMillis is the pause before retrying a failed flush (default 250). */
  retryDelayMillis?: number;
  /** onError receives flush errors; items dropped on a terminal error (400, 403, 413) are passed along. */
  onError?: (err: unknown, droppedItems: unknown[]) => void;
}

type WireItem = ReturnType<typeof toWireItem>;

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
  private force = false;
  /** flushes counts completed flush requests. */
  flushes = 0;

  /** @internal */
  constructor(
    private readonly core: Core,
    readonly queue: string,
    readonly partition: string | undefined,
    private readonly opts: BufferOptions,
  ) {
    this.messageCount = Math.max(1, opts.messageCount ?? 100);
    this.timeMillis = Math.max(0, opts.timeMillis ?? 1000);
    this.maxSize = opts.maxSize && opts.maxSize > 0 ? opts.maxSize : 4 * this.messageCount;
    this.retryDelayMillis = Math.max(1, opts.retryDelayMillis ?? 250);
  }

  /** size is the number of items waiting. */
  get size(): number {
    return this.items.length;
  }

  /** push enqueues items (ids minted now, so a retried flush deduplicates); it waits while the buffer is full. An item that cannot be sent as given throws InvalidItemError before anything is enqueued. */
  async push(items: PushItem<T>[]): Promise<{ buffered: true; count: number }> {
    const wire = toWireItems(this.queue, this.partition, items);
    while (this.items.length > 0 && this.items.length + wire.length > this.maxSize) {
      this.kick(true);
      await new Promise<void>((resolve) => this.spaceWaiters.push(resolve));
    }
    this.items.push(...wire);
    if (this.items.length >= this.messageCount) this.kick();
    else if (!this.timer && !this.flushing) {
      this.timer = setTimeout(() => this.kick(true), this.timeMillis);
      this.timer.unref?.();
    }
    return { buffered: true, count: wire.length };
  }

  /** flush sends everything waiting now and resolves when it is sent (or dropped on a terminal error). */
  async flush(): Promise<void> {
    while (this.items.length > 0 || this.flushing) {
      this.kick(true);
      await this.flushing;
    }
  }

  /** @internal */
  async close(deadline: number): Promise<number> {
    this.closing = true;
    const left = Math.max(0, deadline - Date.now());
    // The deadline's timer is cleared once the flush wins, or it alone would
    // keep Node running until the deadline.
    const flushed = new AbortController();
    try {
      await Promise.race([this.flush(), sleep(left, flushed.signal).catch(() => undefined)]);
    } finally {
      flushed.abort();
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
        if (this.items.length > 0 && !this.timer) {
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
    while (this.items.length >= this.messageCount || (this.force && this.items.length > 0)) {
      const chunk = this.items.slice(0, this.messageCount);
      try {
        await this.core.pushWire(chunk);
        this.items.splice(0, chunk.length);
        this.flushes += 1;
      } catch (err) {
        if (err instanceof PushError) {
          // Keep only the failed items, at the front, and retry them.
          const failed = new Set(err.failed.map((r) => r.index));
          this.items.splice(0, chunk.length, ...chunk.filter((_, i) => failed.has(i)));
          this.report(err, []);
        } else if (isTerminal(err) || (err instanceof APIError && err.status === 400)) {
          this.items.splice(0, chunk.length);
          this.report(err, chunk);
        } else {
          this.report(err, []);
        }
        this.wake();
        await sleep(this.retryDelayMillis);
        continue;
      }
      this.wake();
    }
    this.force = false;
  }

  private report(err: unknown, dropped: unknown[]): void {
    this.core.log.warn(`buffer ${this.queue}/${this.partition ?? "Default"}: flush failed: ${err instanceof Error ? err.message : String(err)}${dropped.length ? ` (${dropped.length} item(s) dropped)` : ""}`);
    try {
      this.opts.onError?.(err, dropped);
    } catch {
      // never let a callback break the flusher
    }
  }
}
