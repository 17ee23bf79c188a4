// The consume loop (docs/consuming.md §3–§5) and the message iterator, both on one Poller (poller.ts).
import { AsyncLocalStorage } from "node:async_hooks";
import { AckError, APIError, ConsumerStoppedError, LanesError, AutoAckDroppedError, HandlerError, RateLimitError, brokerUnavailable, endsConsumerOnAck, errorText, rateLimitOf } from "./errors.js";
import type { AckTarget, Core } from "./internal/core.js";
import { groupByPartition, type AckStatus, type Message, type PopResult } from "./message.js";
import { sleep } from "./internal/http.js";
import { PopCut } from "./internal/popcut.js";
import { popBatch } from "./pop.js";
import { loopErrorDelay, Poller, withBatchCap, type PopSource } from "./poller.js";
import type { QueueState } from "./queue.js";

/** HandlerContext is passed to every handler call; `signal` aborts (reason ConsumerStoppedError) on a hard stop. */
export interface HandlerContext {
  signal: AbortSignal;
}
/** Handler handles one message; returning acks it `completed`, throwing nacks it `failed` (with the error text) and abandons the rest of that partition's slice; a throw that is (or has as its `cause`) the SDK's own error for want of a broker releases it with `retry` instead (docs/consuming.md §3 step 5). */
export type Handler<T = unknown> = (message: Message<T>, ctx: HandlerContext) => unknown;
/** BatchHandler handles one partition's slice of a pop at once; throwing nacks the slice's first message (everything after it redelivers). */
export type BatchHandler<T = unknown> = (messages: Message<T>[], ctx: HandlerContext) => unknown;
/** ErrorHandler receives the loop's errors (transient and terminal); it is called synchronously and must not block. */
export type ErrorHandler = (err: unknown) => void;
/** ConsumeOptions: aborting `signal` is a hard stop (and `closed` still resolves, since the stop was requested). */
export interface ConsumeOptions {
  signal?: AbortSignal | undefined;
}
/** StopOptions bound how long `stop()`/`stopAndCancel()` wait; on expiry they reject and the consumer keeps stopping. */
export interface StopOptions {
  timeoutMillis?: number | undefined;
  signal?: AbortSignal | undefined;
}

type AnyHandler = { kind: "each"; fn: Handler<unknown> } | { kind: "batch"; fn: BatchHandler<unknown> };

/** outagePause is the wait before the next pop after a pop whose handlers failed for want of a broker: a failed pop's wait (loopErrorDelay) for the longest of those failures, so a 429's Retry-After is waited out in full (1 s without one), as after a pop's 429 and as in Go; `streak` counts the pops before it whose handlers so failed, 429s left out. */
export function outagePause(failures: readonly unknown[], streak: number): number {
  return Math.max(0, ...failures.map((err) => loopErrorDelay(rateLimitOf(err) ?? err, streak)));
}

interface PendingAck {
  target: AckTarget;
  status: AckStatus;
  error?: string | undefined;
}

/** DEFAULT_RENEW_EVERY_MILLIS is the longest renewal interval, and the one used when a renewal answer names no expiry: well inside the queues' default leases (300 s, 60 s for push-created queues). */
const DEFAULT_RENEW_EVERY_MILLIS = 10_000;
/** RENEW_UNKNOWN_LEASE_AFTER_MILLIS is when a pop whose lease length the consumer does not know is first renewed: early enough for short leases. The broker never shortens a lease, so the answer's expiry is the pop's own lease when that is longer. */
const RENEW_UNKNOWN_LEASE_AFTER_MILLIS = 1000;
/** MIN_RENEW_EVERY_MILLIS bounds how often a learned lease is renewed. */
const MIN_RENEW_EVERY_MILLIS = 500;

/** renewEveryMillis is how often a running pop's lease is extended: the renewLease interval if given, else a third of the builder's leaseSeconds (at most 10 s), else 0: the lease is unknown and renewEveryForExpiry learns it from the first renewal, as in Go and Python. */
export function renewEveryMillis(everyMillis: number, leaseSeconds: number | undefined): number {
  if (everyMillis > 0) return everyMillis;
  if (leaseSeconds !== undefined && leaseSeconds > 0) return Math.min((leaseSeconds * 1000) / 3, DEFAULT_RENEW_EVERY_MILLIS);
  return 0;
}

/** renewEveryForExpiry is the renewal interval for a lease expiring at `expiresAt`, taken at `poppedAt` (epoch ms, when the pop answer arrived, so the length is never overestimated): a third of it within 0.5–10 s; 10 s without an expiry. */
export function renewEveryForExpiry(poppedAt: number, expiresAt: string | null): number {
  if (expiresAt === null) return DEFAULT_RENEW_EVERY_MILLIS;
  const third = (Date.parse(expiresAt) - poppedAt) / 3;
  return Number.isNaN(third) ? DEFAULT_RENEW_EVERY_MILLIS : Math.min(Math.max(third, MIN_RENEW_EVERY_MILLIS), DEFAULT_RENEW_EVERY_MILLIS);
}

/** renewSeconds is how far one renewal extends the lease: max(2 × interval, 1 s), in whole seconds. */
export function renewSeconds(everyMillis: number): number {
  return Math.ceil(Math.max(2 * everyMillis, 1000) / 1000);
}

/** handlerOf is the consumer whose handler runs the current code: a stop called from there must not wait for the end, which waits for that very handler. */
const handlerOf = new AsyncLocalStorage<Consumer>();

/** LoopOp is what a consume loop or iterator was doing when an error came; it names the error's log line. */
type LoopOp = "pop" | "ack" | "lease renewal" | "handler" | "stop";

/** Reporter takes a consume loop's or iterator's errors: `ends` marks the one that ends it. */
type Reporter = (op: LoopOp, err: unknown, ends?: boolean) => void;

/** reporterFor sends errors to the builder's onError, or, without one, logs one warning line naming the operation (docs/consuming.md §4). */
function reporterFor(core: Core, s: QueueState, who: "consume" | "messages"): Reporter {
  return (op, err, ends = false) => {
    if (!s.onError) {
      core.log.warn(`${who}: ${op}: ${errorText(err)}${ends ? " (ending it)" : ""}`);
      return;
    }
    try {
      s.onError(err);
    } catch (e) {
      core.log.error(`${who}: onError threw: ${errorText(e)}`);
    }
  };
}

/** renewsLease: a pop's lease is renewed while its messages are held, unless renewLease(false) or serverAutoAck(true) (no lease). */
function renewsLease(s: QueueState, res: PopResult<unknown>): boolean {
  return s.renewLease && !!res.leaseId && !s.serverAutoAck;
}

/** FALLBACK_LEASE_MILLIS is the lease a consume loop or iterator assumes for a pop of an older broker, whose answer names no lease, when leaseSeconds does not either: the shortest default lease (push-created queues). */
const FALLBACK_LEASE_MILLIS = 60_000;
/** ACK_RESEND_MARGIN_MILLIS is how long before the lease's expiry the loop or iterator stops resending a failed ack: its last attempt still has time to land. */
const ACK_RESEND_MARGIN_MILLIS = 1000;
/** How long an iterator that is left (break, return, throw, limit, idle, abort) goes on resending a failed ack: leaving should not block for the rest of the lease. The first call always runs to its end under the client's retry policy; no resend starts after the budget. */
const LEAVE_ACK_BUDGET_MILLIS = 5000;

/** LeaseExpiry is the latest expiry (epoch ms) a consume loop or iterator knows for a pop's lease: its length (popLeaseSeconds, else FALLBACK_LEASE_MILLIS) from the pop's answer, moved by each applied renewal to when it was sent plus the seconds it asked for. */
interface LeaseExpiry {
  at: number;
}

/** popLeaseSeconds is the lease length a consume loop or iterator counts with for a pop: the one its answer names, else the builder's leaseSeconds (undefined: unknown). The length, not the answer's leaseExpiresAt, which is on the database's clock. */
function popLeaseSeconds(s: QueueState, res: PopResult<unknown>): number | undefined {
  return res.leaseSeconds !== undefined && res.leaseSeconds > 0 ? res.leaseSeconds : s.leaseSeconds;
}

/** leaseExpiryOf starts a pop's LeaseExpiry when its answer arrives. */
function leaseExpiryOf(leaseSeconds: number | undefined): LeaseExpiry {
  return { at: Date.now() + (leaseSeconds !== undefined && leaseSeconds > 0 ? leaseSeconds * 1000 : FALLBACK_LEASE_MILLIS) };
}

/** ackResendable: a failed ack call failed for want of a broker (no answer, 5xx, 429), so the loop resends it; not a 4xx (408 and 409 concern that ack alone), nor an answer the SDK cannot use (UnexpectedAnswerError: a proxy's page). */
function ackResendable(err: unknown): boolean {
  return brokerUnavailable(err) || (err instanceof APIError && err.status >= 500);
}

/** handlerFailureAck is the ack of a message whose handler threw err: `retry` (no retry spent) when it failed for want of a broker, so an outage dead-letters nothing, else `failed` with the error text, which spends one retry. */
function handlerFailureAck(target: AckTarget, err: unknown): PendingAck {
  return brokerUnavailable(err) ? { target, status: "retry" } : { target, status: "failed", error: errorText(err) };
}

/** renewWhileHeld extends a pop's lease until the returned function is called: every renewEveryMillis, or, when the lease is unknown, 1 s after the pop and then at a third of the lease the first answer shows. A failed renewal is reported; one the broker did not apply also ends the renewals. */
function renewWhileHeld(core: Core, s: QueueState, leaseId: string, leaseSeconds: number | undefined, report: Reporter, expiry?: LeaseExpiry): () => void {
  const poppedAt = Date.now();
  let every = renewEveryMillis(s.renewLeaseMillis, leaseSeconds);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const schedule = (next: number): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      const seconds = renewSeconds(next);
      const sentAt = Date.now();
      core.renew([leaseId], seconds).then(
        (r) => {
          if (stopped) return;
          if (!r[0]?.success) {
            report("lease renewal", new LanesError(`lease ${leaseId}: renewal not applied (expired or released)`));
            return;
          }
          // The broker extends to at least its now + seconds, and its now is after sentAt; the answer's newExpiresAt is on the database's clock.
          const renewedTo = sentAt + seconds * 1000;
          if (expiry && renewedTo > expiry.at) expiry.at = renewedTo;
          if (every === 0) every = renewEveryForExpiry(poppedAt, r[0].newExpiresAt);
          schedule(every);
        },
        (err: unknown) => {
          if (stopped) return;
          report("lease renewal", err);
          schedule(next);
        },
      );
    }, next);
  };
  schedule(every || RENEW_UNKNOWN_LEASE_AFTER_MILLIS);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** loopAcks is the smallest list of acks with the broker effect of `items`, a consume loop's or iterator's acks of one pop (docs/sdk-design.md, "Loop acks"). An ack is an offset commit, so per (partition, lease, group) the `completed` acks before the first nack collapse into the last of them; the nacks and anything after them go as they are. A partition whose acks name a transaction id twice goes whole: the broker resolves the k-th mention of an id to its k-th copy in the lease's span, so dropping a mention could move the offset an ack names. */
export function loopAcks(items: PendingAck[]): PendingAck[] {
  const spans = new Map<string, AckSpan>();
  let s: AckSpan | undefined;
  let spanTarget: AckTarget | undefined; // the item that found `s`: a pop's acks come partition by partition, so the next one most often shares its span and needs no key
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    const t = it.target;
    if (s === undefined || spanTarget === undefined || !sameAckSpan(t, spanTarget)) {
      const key = JSON.stringify([t.partitionId, t.leaseId ?? "", t.consumerGroup ?? ""]);
      s = spans.get(key);
      if (!s) spans.set(key, (s = { prefix: [], nacked: false, ids: new Set(), repeat: false }));
      spanTarget = t;
    }
    const seen = s.ids.size;
    s.ids.add(t.transactionId);
    if (s.ids.size === seen) s.repeat = true; // the id was there already
    if (it.status !== "completed") s.nacked = true;
    else if (!s.nacked) s.prefix.push(i);
  }
  const drop = new Uint8Array(items.length);
  let dropped = 0;
  for (const span of spans.values()) {
    if (span.repeat) continue;
    for (let k = 0; k < span.prefix.length - 1; k++) drop[span.prefix[k]!] = 1;
    dropped += Math.max(0, span.prefix.length - 1);
  }
  return dropped === 0 ? items : items.filter((_, i) => drop[i] === 0);
}

/** AckSpan is what loopAcks gathers of one (partition, lease, group): the indexes of its `completed` acks before its first nack, and whether a transaction id repeats in it. */
interface AckSpan {
  prefix: number[];
  nacked: boolean;
  ids: Set<string>;
  repeat: boolean;
}

/** sameAckSpan: two ack targets are of one (partition, lease, group), as loopAcks keys them. */
function sameAckSpan(a: AckTarget, b: AckTarget): boolean {
  return a.partitionId === b.partitionId && (a.leaseId ?? "") === (b.leaseId ?? "") && (a.consumerGroup ?? "") === (b.consumerGroup ?? "");
}

/**
 * ackUntilDone sends a pop's acks for a consume loop or iterator. A call that fails as a broker or network failure does (5xx, 429, no answer) is reported and resent after the loop's error backoff until it lands, the lease is about to expire, or `stop` aborts (a hard stop, the iterator's signal) (docs/consuming.md §4). A lost ack would hold the partition until the lease expires and redeliver the whole pop; a resend is safe, since every item names the pop's lease: a `completed` the broker already applied answers `noop`, and a nack it applied released the lease, so its resend is refused, changing nothing. No resend starts after `until` (an iterator's leave, LEAVE_ACK_BUDGET_MILLIS from leaving). Per-item failures are reported; the error that ends the loop (endsConsumerOnAck) is returned unreported.
 */
async function ackUntilDone(core: Core, items: PendingAck[], group: string, report: Reporter, expiry: LeaseExpiry, stop: AbortSignal | undefined, until = Infinity): Promise<unknown> {
  if (items.length === 0) return undefined;
  items = loopAcks(items);
  let streak = 0; // failed calls so far, 429s aside (as the pop's backoff counts them)
  for (;;) {
    try {
      const results = await core.ackItems(items, group);
      if (results.some((r) => !r.success)) report("ack", new AckError(results));
      return undefined;
    } catch (err) {
      if (endsConsumerOnAck(err)) return err;
      report("ack", err);
      if (!ackResendable(err)) return undefined;
      const wait = loopErrorDelay(err, streak);
      if (!(err instanceof RateLimitError)) streak++;
      if (expiry.at - Date.now() < wait + ACK_RESEND_MARGIN_MILLIS) return undefined; // the lease ends first: the pop redelivers
      if (until - Date.now() < wait) return undefined; // the leave's budget ends first: the pop redelivers after its lease
      try {
        await sleep(wait, stop);
      } catch {
        return undefined; // a stop abandons the ack
      }
    }
  }
}

/** Consumer is a running consume loop. `stop()` drains (soft), `stopAndCancel()` also aborts handler signals (hard), `closed` settles when every worker has exited and the final acks are sent (rejecting with a terminal error). A Consumer is also PromiseLike: `await q.consume(h)` waits for `closed`. */
export class Consumer implements PromiseLike<void> {
  /** closed resolves when the consumer has ended and its final acks are sent; it rejects with the terminal error (403, 413, other 4xx, 501) that ended it. */
  readonly closed: Promise<void>;
  private stopping = false;
  private hard = false;
  private ended = false;
  private terminal: unknown = undefined;
  /** fetchCtl aborts at the stop: it ends the pauses between pops, and its Poller then half-closes a pop in flight (serverAutoAck aside). */
  private readonly fetchCtl = new AbortController();
  private readonly handlerCtl = new AbortController();
  private handed = 0;
  /** claimed counts, under serverAutoAck(true) with a limit, the messages popped or being popped (a pop reserves its batch): the broker commits them in the pop, so the pops together may not take more than the limit. */
  private claimed = 0;
  private popsReserving = 0;
  private roomWaiters: (() => void)[] = [];
  private inFlight = 0;
  private lastMessageAt = Date.now();
  private idleTimer: ReturnType<typeof setTimeout> | undefined;
  private softStopTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly onUserAbort = () => this.beginHardStop();
  private readonly report: Reporter;

  /** @internal */
  constructor(
    private readonly core: Core,
    private readonly source: PopSource<unknown>,
    private readonly s: QueueState,
    private readonly handler: AnyHandler,
    private readonly opts: ConsumeOptions,
  ) {
    if (typeof handler.fn !== "function") throw new LanesError("consume: handler must be a function");
    this.report = reporterFor(core, s, "consume");
    opts.signal?.addEventListener("abort", this.onUserAbort, { once: true });
    if (opts.signal?.aborted) this.beginHardStop();
    if (s.idleMillis > 0) this.armIdle(s.idleMillis);
    const workers = Array.from({ length: s.concurrency }, () => this.worker());
    this.closed = Promise.all(workers).then(() => {
      this.ended = true;
      clearTimeout(this.idleTimer);
      clearTimeout(this.softStopTimer);
      opts.signal?.removeEventListener("abort", this.onUserAbort);
      if (this.terminal !== undefined) throw this.terminal;
    });
    this.closed.catch(() => {}); // a terminal error is reported through `closed`, never as an unhandled rejection
  }

  then<R1 = void, R2 = never>(onfulfilled?: ((value: void) => R1 | PromiseLike<R1>) | null, onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null): Promise<R1 | R2> {
    return this.closed.then(onfulfilled, onrejected);
  }

  /** stopping is true once a stop was requested or the consumer stopped itself. */
  get isStopping(): boolean {
    return this.stopping;
  }

  /** done is true once the consumer has ended (every worker exited, final acks sent): the synchronous view of `closed` having settled, like Go's `Done()` and Python's `done`. */
  get done(): boolean {
    return this.ended;
  }

  /** error is the terminal error (403, 413, other 4xx, 501) that ended or is ending the consumer, the one `closed` rejects with; undefined after a requested stop, a limit or an idle end. Like Go's `Err()` and Python's `error`. */
  get error(): unknown {
    return this.terminal;
  }

  /** stop is a soft stop: stop fetching, let handlers finish their current message, ack what was handled, release the rest with `retry` (with autoAck(false) neither, but for partitions of which nothing was handed over). Resolves when the consumer has ended; rejects if `timeoutMillis`/`signal` expire first (the consumer keeps stopping). Called from inside one of this consumer's handlers, it requests the stop and resolves at once (`closed` says when it has ended). */
  stop(opts: StopOptions = {}): Promise<void> {
    this.beginSoftStop();
    return this.waitEnd(opts);
  }

  /** stopAndCancel is a hard stop: as stop, and every handler's signal aborts with ConsumerStoppedError; a handler that then throws that cancellation (the signal's reason, or an AbortError) is released with `retry` (no retry budget spent; not with autoAck(false)), while any other error is nacked `failed` as usual. From inside a handler it resolves at once, as stop does. */
  stopAndCancel(opts: StopOptions = {}): Promise<void> {
    this.beginHardStop();
    return this.waitEnd(opts);
  }

  private waitEnd(opts: StopOptions): Promise<void> {
    if (handlerOf.getStore() === this) return Promise.resolve();
    const ended = this.closed.then(
      () => undefined,
      () => undefined,
    );
    if (this.ended || (opts.timeoutMillis === undefined && !opts.signal)) return ended;
    return new Promise<void>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const onAbort = () => {
        clearTimeout(timer);
        reject(opts.signal?.reason ?? new LanesError("stop: aborted; the consumer is still stopping"));
      };
      if (opts.timeoutMillis !== undefined) {
        timer = setTimeout(() => {
          opts.signal?.removeEventListener("abort", onAbort);
          reject(new LanesError(`stop: still stopping after ${opts.timeoutMillis} ms`));
        }, opts.timeoutMillis);
      }
      if (opts.signal?.aborted) return onAbort();
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      void ended.then(() => {
        clearTimeout(timer);
        opts.signal?.removeEventListener("abort", onAbort);
        resolve();
      });
    });
  }

  private beginSoftStop(): void {
    if (this.stopping) return;
    this.stopping = true;
    clearTimeout(this.idleTimer);
    this.fetchCtl.abort(new ConsumerStoppedError());
    if (this.s.softStopTimeoutMillis > 0 && !this.hard) {
      this.softStopTimer = setTimeout(() => this.beginHardStop(), this.s.softStopTimeoutMillis);
      this.softStopTimer.unref?.();
    }
  }

  private beginHardStop(): void {
    this.beginSoftStop();
    if (this.hard) return;
    this.hard = true;
    clearTimeout(this.softStopTimer);
    this.handlerCtl.abort(new ConsumerStoppedError());
  }

  private armIdle(ms: number): void {
    this.idleTimer = setTimeout(() => {
      if (this.stopping) return;
      const left = this.idleDeadline() - Date.now();
      if (left <= 0) this.stopIdle();
      else this.armIdle(left);
    }, ms);
  }

  /** idleDeadline (epoch ms) is when the consumer's idle time runs out: while a worker handles a pop it is not idle, so the deadline is a whole idleMillis away. */
  private idleDeadline(): number {
    return (this.inFlight > 0 ? Date.now() : this.lastMessageAt) + this.s.idleMillis;
  }

  private stopIdle(): void {
    if (this.stopping) return;
    this.core.log.debug(`consumer idle for ${Date.now() - this.lastMessageAt} ms; stopping`);
    this.beginSoftStop();
  }

  private fail(op: LoopOp, err: unknown): void {
    if (this.terminal === undefined) this.terminal = err;
    this.report(op, err, true);
    this.beginSoftStop();
  }

  private limitReached(): boolean {
    return this.s.limit > 0 && this.handed >= this.s.limit;
  }

  /** stopsHanding: a stop or the limit ends the handing of a pop's messages, except that under serverAutoAck(true) a soft stop does not: those messages are committed and nothing can release them. */
  private stopsHanding(): boolean {
    return (this.s.serverAutoAck ? this.hard : this.stopping) || this.limitReached();
  }

  private capsBatch(): boolean {
    return this.s.serverAutoAck === true && this.s.limit > 0;
  }

  private roomLeft(): number {
    return this.s.limit - this.claimed;
  }

  /** cappedSource reserves each pop's batch (at most what is left of the limit) while the pop runs and gives back what it did not bring, so concurrent workers pop side by side yet never take more than the limit between them. */
  private cappedSource(): PopSource<unknown> {
    const want = popBatch(this.s, this.core.popAutopilot);
    return withBatchCap(
      this.source,
      () => {
        const room = Math.min(this.roomLeft(), want);
        this.claimed += room;
        this.popsReserving += 1;
        return room;
      },
      (reserved, got) => {
        this.claimed -= reserved - got;
        this.popsReserving -= 1;
        for (const wake of this.roomWaiters.splice(0)) wake();
      },
    );
  }

  /** waitForRoom resolves true once some of the limit is unclaimed, or false when all of it is (or the consumer stops): this worker is then done. */
  private async waitForRoom(): Promise<boolean> {
    while (this.roomLeft() <= 0) {
      if (this.popsReserving === 0 || this.stopping) return false;
      await new Promise<void>((wake) => this.roomWaiters.push(wake));
    }
    return true;
  }

  private async worker(): Promise<void> {
    const capped = this.capsBatch();
    // Under serverAutoAck(true) the broker commits a pop's messages, so only a hard stop cuts a pop in flight (an abort): a soft stop lets it answer and hands its messages over.
    // Otherwise a stop, soft or hard, half-closes the pop (fetchCtl's abort fires the cut): it ends as soon as an abort would, and an answer already written is read and released, not left leased.
    const pops = this.s.serverAutoAck ? { signal: this.handlerCtl.signal } : { cut: new PopCut() };
    const poller = new Poller(capped ? this.cappedSource() : this.source, this.s, this.fetchCtl.signal, (err) => this.report("pop", err), pops);
    const idleDeadline = this.s.idleMillis > 0 ? () => this.idleDeadline() : undefined;
    let outages = 0; // consecutive pops in which a handler failed for want of a broker, 429s aside
    while (!this.stopping) {
      if (this.endsAtLimit()) break;
      if (capped && !(await this.waitForRoom())) break;
      let res: PopResult<unknown> | undefined;
      try {
        res = await poller.next(() => this.stopping || (capped && this.roomLeft() <= 0), undefined, idleDeadline);
      } catch (err) {
        this.fail("pop", err);
        break;
      }
      if (res === undefined) {
        if (poller.idleEnded) this.stopIdle();
        continue; // stopping, idle, or another worker's pop holds the rest of the limit
      }
      this.lastMessageAt = Date.now();
      this.inFlight += 1;
      let outage: unknown[] = [];
      try {
        outage = await this.handlePop(res);
      } finally {
        this.inFlight -= 1;
        this.lastMessageAt = Date.now();
      }
      if (this.endsAtLimit()) break;
      if (outage.length === 0) {
        outages = 0;
        continue;
      }
      // The broker the handler needed is down: pop again after the wait of a failed pop, not at once, or the released message would come back to fail in a tight loop. A stop (the idle timeout's too) cuts the wait short.
      await sleep(outagePause(outage, outages), this.fetchCtl.signal).catch(() => undefined);
      // A 429 neither counts in the doubling nor resets it, as after a pop's 429: the broker answered, and said how long to wait.
      if (!outage.every((err) => rateLimitOf(err) !== undefined)) outages += 1;
    }
  }

  /** endsAtLimit soft-stops the consumer once the limit is reached. Only a worker between pops calls it, as in Go and Python: stopping at the hand-over of the last message would cut the pops other workers have in flight, and one whose answer the broker had already sent would leave its messages leased, unhandled, until the lease expires instead of releasing them with `retry`. */
  private endsAtLimit(): boolean {
    if (!this.limitReached()) return false;
    this.beginSoftStop();
    return true;
  }

  /** stoppedByCancel: the handler failed because a hard stop aborted its signal (it threw the signal's reason, a ConsumerStoppedError, or the AbortError of an operation given the signal), so its message is released with `retry`, not charged. Any other failure, even during a hard stop, is the handler's own (docs/consuming.md §5). */
  private stoppedByCancel(err: unknown): boolean {
    const signal = this.handlerCtl.signal;
    if (!signal.aborted) return false;
    if (err === signal.reason || err instanceof ConsumerStoppedError) return true;
    return err instanceof Error && err.name === "AbortError";
  }

  /** handlerFailed is the ack of `target` after a handler call on `handed` threw `err`: `retry` when a hard stop cancelled the call (stoppedByCancel), else handlerFailureAck's, the failure reported (with reportHandlerErrors(true), as a HandlerError naming them) and, when it is for want of a broker, added to `outage`. */
  private handlerFailed(handed: Message<unknown>[], target: AckTarget, err: unknown, outage: unknown[]): PendingAck {
    if (this.stoppedByCancel(err)) return { target, status: "retry" };
    if (this.s.reportHandlerErrors) this.report("handler", new HandlerError(handed, err));
    if (brokerUnavailable(err)) outage.push(err);
    return handlerFailureAck(target, err);
  }

  /** handlePop hands a pop's messages to the handler and acks them; it returns the failures of the pop's handlers for want of a broker (brokerUnavailable). */
  private async handlePop(res: PopResult<unknown>): Promise<unknown[]> {
    const acks: PendingAck[] = [];
    const outage: unknown[] = [];
    // Under serverAutoAck(true) the messages not handed over (a hard stop, or the rest of a partition after a handler failure) are lost: reported below.
    let handedOver = 0;
    const handedFrom = new Set<string>(); // partitions of which a message was handed to the handler
    const ctx: HandlerContext = { signal: this.handlerCtl.signal };
    const leaseSeconds = popLeaseSeconds(this.s, res);
    const expiry = leaseExpiryOf(leaseSeconds);
    const stopRenewing = renewsLease(this.s, res) ? renewWhileHeld(this.core, this.s, res.leaseId, leaseSeconds, this.report, expiry) : () => undefined;
    const fn = this.handler.fn;
    try {
      for (const slice of groupByPartition(res.messages)) {
        if (this.handler.kind === "each") {
          for (const m of slice) {
            if (this.stopsHanding()) {
              acks.push({ target: m, status: "retry" });
              break;
            }
            // A slice is one partition's: it is noted once, at its first message (a string's hash per message showed in profiles).
            if (m === slice[0]) handedFrom.add(m.partitionId);
            this.handed += 1;
            handedOver += 1;
            // Awaited here, not in an async helper: each promise costs more while AsyncLocalStorage's promise hooks are on (Node 20).
            try {
              await handlerOf.run(this, () => (fn as Handler<unknown>)(m, ctx));
            } catch (err) {
              acks.push(this.handlerFailed([m], m, err, outage));
              break;
            }
            acks.push({ target: m, status: "completed" });
          }
        } else {
          const first = slice[0]!;
          if (this.stopsHanding()) {
            acks.push({ target: first, status: "retry" });
            continue;
          }
          // Hand at most what is left of `limit`; the first message cut off is released with `retry`.
          const room = this.s.limit > 0 ? Math.min(slice.length, this.s.limit - this.handed) : slice.length;
          const handed = slice.slice(0, room);
          this.handed += handed.length;
          handedOver += handed.length;
          handedFrom.add(first.partitionId);
          try {
            await handlerOf.run(this, () => (fn as BatchHandler<unknown>)(handed, ctx));
          } catch (err) {
            acks.push(this.handlerFailed(handed, first, err, outage));
            continue;
          }
          for (const m of handed) acks.push({ target: m, status: "completed" });
          if (room < slice.length) acks.push({ target: slice[room]!, status: "retry" });
        }
      }
    } finally {
      stopRenewing();
    }
    if (this.s.serverAutoAck) {
      const dropped = res.messages.length - handedOver;
      if (dropped > 0) {
        if (this.hard) this.report("stop", new AutoAckDroppedError(dropped, "the consumer was stopped hard"));
        else this.report("handler", new AutoAckDroppedError(dropped, "after a handler failure in their partition"));
      }
      return outage;
    }
    if (!res.leaseId) return outage;
    // With autoAck(false) the handler owns what it was handed and may not have acked it, and a retry below an unacked message would release that one too: only a partition of which nothing was handed over is released.
    const items = this.s.autoAck ? acks : acks.filter((a) => a.status === "retry" && !handedFrom.has(a.target.partitionId));
    const ending = await ackUntilDone(this.core, items, res.consumerGroup, this.report, expiry, this.handlerCtl.signal);
    if (ending !== undefined) this.fail("ack", ending);
    return outage;
  }
}

/** messageIterator is the pull form of the loop, as an async generator (see QueueBuilder.messages). The builder's `limit` ends it after that many messages, and `idleMillis` once no message came for that long, counted from when the caller asked for the next one (as in Go). A pop's lease is renewed while its messages are held, as in the loop. Only an error that ends the iteration is thrown (403, 413, other 4xx, 501, from a pop or an ack); the others go to onError, or a warning. A pop's acks go out when its last message is left; a call that fails for want of a broker (no answer, 5xx, 429) is resent as the loop resends it (ackUntilDone), while the lease lasts and `signal` is not aborted, and, when the iteration ends, for no more than LEAVE_ACK_BUDGET_MILLIS after it. */
export async function* messageIterator<T>(core: Core, source: PopSource<T>, s: QueueState, signal: AbortSignal | undefined): AsyncGenerator<Message<T>, void, undefined> {
  let yielded = 0;
  let lastMessageAt = Date.now();
  const limitReached = () => s.limit > 0 && yielded >= s.limit;
  const idleDeadline = s.idleMillis > 0 ? () => lastMessageAt + s.idleMillis : undefined;
  const report = reporterFor(core, s, "messages");
  // Under serverAutoAck(true) a pop commits its messages: it never takes more than is left of the limit.
  const popFrom = s.serverAutoAck && s.limit > 0 ? withBatchCap(source, () => s.limit - yielded) : source;
  // An abort of `signal` half-closes the pop in flight, as a consumer's stop does; under serverAutoAck(true) it aborts the pop, whose answer would be dropped anyway.
  const poller = new Poller(popFrom, s, signal, (err) => report("pop", err), s.serverAutoAck ? { signal } : { cut: new PopCut() });
  while (!signal?.aborted && !limitReached()) {
    const res = await poller.next(() => signal?.aborted === true, undefined, idleDeadline);
    if (res === undefined) return;
    lastMessageAt = Date.now();
    const leaseSeconds = popLeaseSeconds(s, res);
    const expiry = leaseExpiryOf(leaseSeconds);
    const stopRenewing = renewsLease(s, res) ? renewWhileHeld(core, s, res.leaseId, leaseSeconds, report, expiry) : () => undefined;
    const slices = groupByPartition(res.messages);
    const pos = slices.map(() => 0);
    let handedOver = 0;
    let popDone = false; // every message of the pop handed over and the caller asked for the next
    try {
      outer: for (let k = 0; k < slices.length; k++) {
        const slice = slices[k]!;
        for (let i = 0; i < slice.length; i++) {
          if (signal?.aborted || limitReached()) break outer;
          yielded += 1;
          handedOver += 1;
          yield slice[i]!;
          pos[k] = i + 1;
        }
      }
      popDone = true;
      lastMessageAt = Date.now();
    } finally {
      stopRenewing();
      if (s.serverAutoAck) {
        const dropped = res.messages.length - handedOver;
        if (dropped > 0) report("stop", new AutoAckDroppedError(dropped, "the iteration ended before they were handed over"));
      } else if (res.leaseId && (s.autoAck || handedOver === 0)) {
        // With autoAck(false) nothing is acked or released once a message was handed over: the caller may still hold unacked messages, and a retry below one would release it too. A pop that answered after the abort handed nothing over: it is released, as the loop releases it.
        const acks: PendingAck[] = [];
        slices.forEach((slice, k) => {
          const p = pos[k]!;
          for (let i = 0; i < p; i++) acks.push({ target: slice[i]!, status: "completed" });
          if (p < slice.length) acks.push({ target: slice[p]!, status: "retry" });
        });
        // Leaving (the caller's break, return or throw, or the end at limit or on an abort) resends only within the leave's budget.
        const leaving = !popDone || signal?.aborted === true || limitReached();
        const until = leaving ? Date.now() + LEAVE_ACK_BUDGET_MILLIS : Infinity;
        const ending = await ackUntilDone(core, acks, res.consumerGroup, report, expiry, signal, until);
        // An ack error that ends the iteration is raised even when the caller left early: the caller must learn of it.
        // eslint-disable-next-line no-unsafe-finally
        if (ending !== undefined) throw ending;
      }
    }
  }
}
