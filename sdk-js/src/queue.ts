// QueueBuilder: the fluent, immutable builder behind `lanes.queue(name)` — producing, popping,
// consuming, the message iterator, queue configuration and the DLQ view.
import { Admin, type WalkOptions } from "./admin.js";
import { LanesError } from "./errors.js";
import { checkGroup, checkNames } from "./names.js";
import type { PushBuffer, BufferOptions } from "./buffer.js";
import { Consumer, type BatchHandler, type ConsumeOptions, type ErrorHandler, type Handler, messageIterator } from "./consumer.js";
import type { Core, PushItem, PushResult } from "./internal/core.js";
import { QUEUE_MODE, toWireItems } from "./internal/core.js";
import type { PopCut } from "./internal/popcut.js";
import type { Message, PopResult } from "./message.js";
import { popQuery, type PopKnobs } from "./pop.js";
import type { PopSource } from "./poller.js";
import type { RequestOptions } from "./request-options.js";
import type { ConfigureResult, DeleteQueueResult, DlqList, DlqMessage, PopResponse, QueueDepth, QueueOptions, WireMessage } from "./types.js";

/**
 * SubscriptionMode is where a named group starts on first contact: `new` (default) skips the backlog, `all` reads it.
 * `new-only` is the reference clients' spelling of `new`; the broker accepts both.
 */
export type SubscriptionMode = "new" | "new-only" | "all";

/** QueueState is the builder's settings (internal; read through the builder methods). */
export interface QueueState {
  queue?: string | undefined;
  partition?: string | undefined;
  namespace?: string | undefined;
  task?: string | undefined;
  group?: string | undefined;
  subscriptionMode?: SubscriptionMode | undefined;
  subscriptionFrom?: string | undefined;
  batch?: number | undefined;
  partitions?: number | undefined;
  autopilot?: boolean | undefined;
  wait: boolean;
  timeoutMillis: number;
  leaseSeconds?: number | undefined;
  serverAutoAck?: boolean | undefined;
  concurrency: number;
  limit: number;
  idleMillis: number;
  renewLease: boolean;
  /** renewLeaseMillis is the renewal interval; 0 = the default (renewEveryMillis in consumer.ts). */
  renewLeaseMillis: number;
  autoAck: boolean;
  onError?: ErrorHandler | undefined;
  softStopTimeoutMillis: number;
  reportHandlerErrors: boolean;
  config?: QueueOptions | undefined;
}

export const DEFAULT_QUEUE_STATE: QueueState = {
  wait: true,
  timeoutMillis: 30_000,
  concurrency: 1,
  limit: 0,
  idleMillis: 0,
  renewLease: true,
  renewLeaseMillis: 0,
  autoAck: true,
  softStopTimeoutMillis: 0,
  reportHandlerErrors: false,
};

export interface BufferRegistry {
  buffer(queue: string, partition: string | undefined, opts: BufferOptions): PushBuffer;
}

function nonNegInt(name: string, n: number): number {
  if (!Number.isFinite(n) || n < 0 || !Number.isInteger(n)) throw new LanesError(`${name}: want a non-negative integer, got ${n}`);
  return n;
}

/** QueueBuilder addresses a queue (optionally one partition, or a namespace/task for discovery) and carries pop and consume settings. Every setter returns a new builder, so a base builder can be shared. `T` types the message payload. */
export class QueueBuilder<T = unknown> {
  /** @internal */
  constructor(
    private readonly core: Core,
    private readonly buffers: BufferRegistry,
    private readonly s: QueueState,
  ) {}

  private with(patch: Partial<QueueState>): QueueBuilder<T> {
    return new QueueBuilder<T>(this.core, this.buffers, { ...this.s, ...patch });
  }

  /** partition names one partition: pushes go there and pops use the partition route. */
  partition(name: string): QueueBuilder<T> {
    return this.with({ partition: name });
  }
  /** namespace filters a discovery pop (a builder from `queue()` without a name). */
  namespace(ns: string): QueueBuilder<T> {
    return this.with({ namespace: ns });
  }
  /** task filters a discovery pop. */
  task(task: string): QueueBuilder<T> {
    return this.with({ task });
  }
  /** group names the consumer group; none means queue mode (competing consumers). */
  group(group: string): QueueBuilder<T> {
    return this.with({ group });
  }
  /** subscriptionMode decides where a new group starts on first contact (`new` or `all`). */
  subscriptionMode(mode: SubscriptionMode): QueueBuilder<T> {
    return this.with({ subscriptionMode: mode });
  }
  /** subscriptionFrom starts a new group at `now` or an ISO-8601 instant. */
  subscriptionFrom(from: string | Date): QueueBuilder<T> {
    return this.with({ subscriptionFrom: from instanceof Date ? from.toISOString() : from });
  }
  /** batch pins the message budget per pop; 0 = unset (the broker sizes it under autopilot). */
  batch(n: number): QueueBuilder<T> {
    return this.with({ batch: nonNegInt("batch", n) });
  }
  /** partitions pins how many partitions one pop may claim; 0 = unset (the broker sizes it under autopilot). */
  partitions(n: number): QueueBuilder<T> {
    return this.with({ partitions: nonNegInt("partitions", n) });
  }
  /** autopilot(false) restores the client-side defaults exactly (batch 1, one partition); autopilot(true) outranks LANES_SDK_POP_AUTOPILOT=off. */
  autopilot(on: boolean): QueueBuilder<T> {
    return this.with({ autopilot: on });
  }
  /** wait long-polls (default true): the broker parks the pop until a message arrives or the timeout passes. */
  wait(on: boolean): QueueBuilder<T> {
    return this.with({ wait: on });
  }
  /** timeoutMillis is the long-poll timeout sent to the broker (default 30000). */
  timeoutMillis(ms: number): QueueBuilder<T> {
    return this.with({ timeoutMillis: nonNegInt("timeoutMillis", ms) });
  }
  /** leaseSeconds overrides the queue's lease time for these pops. */
  leaseSeconds(n: number): QueueBuilder<T> {
    return this.with({ leaseSeconds: nonNegInt("leaseSeconds", n) });
  }
  /** serverAutoAck(true) makes the broker commit in the pop itself (at-most-once, no lease); the loop then never acks. */
  serverAutoAck(on: boolean): QueueBuilder<T> {
    return this.with({ serverAutoAck: on });
  }
  /** concurrency is the number of consume workers (default 1). Order per partition holds with any value. */
  concurrency(n: number): QueueBuilder<T> {
    if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new LanesError(`concurrency: want 1..10000, got ${n}`);
    return this.with({ concurrency: n });
  }
  /** limit stops the consumer after n messages handed to the handler (0 = no limit); a batch slice larger than what is left is cut to it and the rest released with `retry`. */
  limit(n: number): QueueBuilder<T> {
    return this.with({ limit: nonNegInt("limit", n) });
  }
  /** idleMillis stops the consumer after that long without a message (0 = never); each pop waits at most the idle time left, so a longer `timeoutMillis` does not delay the end (docs/consuming.md §3). */
  idleMillis(ms: number): QueueBuilder<T> {
    return this.with({ idleMillis: nonNegInt("idleMillis", ms) });
  }
  /** renewLease sets lease renewal, which is on by default: while handlers run, the pop's lease is extended every `everyMillis` (omitted or 0 = a third of the lease the pop's answer names, else of `leaseSeconds`, at most 10 s; from an older broker without `leaseSeconds`, 1 s after the pop, then a third of the lease the renewal's answer shows, at most 10 s), so a handler slower than the lease keeps its messages. `renewLease(false)` turns it off. */
  renewLease(enabled: boolean, everyMillis = 0): QueueBuilder<T> {
    return this.with({ renewLease: enabled, renewLeaseMillis: nonNegInt("renewLease", everyMillis) });
  }
  /** each hands messages to the handler one at a time (the default for `consume`; kept for the reference API). */
  each(): QueueBuilder<T> {
    return this;
  }
  /** autoAck(false) leaves acknowledgement to the handler (e.g. through a transaction); default true: ack after the handler returns, nack when it throws. With autoAck(false) a `retry` below a message not acked yet would release that one too, so a stop or the limit releases only the partitions of a pop of which nothing was handed to the handler, and leaving the `messages()` iterator early releases nothing: the rest redelivers when the lease expires. */
  autoAck(on: boolean): QueueBuilder<T> {
    return this.with({ autoAck: on });
  }
  /** onError receives the loop's transient and terminal errors (never handler errors unless reportHandlerErrors(true)). */
  onError(fn: ErrorHandler): QueueBuilder<T> {
    return this.with({ onError: fn });
  }
  /** softStopTimeoutMillis escalates a soft stop to a hard one after that long (0 = never). */
  softStopTimeoutMillis(ms: number): QueueBuilder<T> {
    return this.with({ softStopTimeoutMillis: nonNegInt("softStopTimeoutMillis", ms) });
  }
  /** reportHandlerErrors(true) also passes handler errors to onError. */
  reportHandlerErrors(on: boolean): QueueBuilder<T> {
    return this.with({ reportHandlerErrors: on });
  }
  /** config sets the options `create()` sends. */
  config(options: QueueOptions): QueueBuilder<T> {
    return this.with({ config: { ...this.s.config, ...options } });
  }

  private requireQueue(what: string): string {
    if (this.s.queue === undefined || this.s.queue === "") throw new LanesError(`${what}: needs a queue name`);
    return this.s.queue;
  }

  /** push sends items in one request and returns one result per item; throws PushError (with all results) when an item is `failed`. Transaction ids are minted (UUIDv7) when absent. */
  async push(items: PushItem<T>[], opts: { signal?: AbortSignal | undefined } = {}): Promise<PushResult[]> {
    const queue = this.requireQueue("push");
    return this.core.pushWire(
      toWireItems(queue, this.s.partition, items),
      opts.signal,
    );
  }

  /** buffer returns this (queue, partition)'s client-side buffer: pushes are batched and flushed on count or time, and on `lanes.close()`. */
  buffer(opts: BufferOptions = {}): PushBuffer<T> {
    return this.buffers.buffer(this.requireQueue("buffer"), this.s.partition, opts) as PushBuffer<T>;
  }

  /** @internal throws, before anything is sent, for a builder no pop can be made of: InvalidNameError for a queue or partition name the broker refuses. */
  popTarget(): { path: string; knobs: PopKnobs } {
    const s = this.s;
    checkGroup("pop", s.group);
    let path: string;
    if (s.queue) {
      checkNames("pop", s.queue, s.partition);
      path = `/api/v1/pop/queue/${encodeURIComponent(s.queue)}`;
      if (s.partition !== undefined) path += `/partition/${encodeURIComponent(s.partition)}`;
    } else if (s.namespace || s.task) {
      path = "/api/v1/pop";
    } else {
      throw new LanesError("pop: needs a queue name or a namespace/task");
    }
    return {
      path,
      knobs: {
        batch: s.batch,
        partitions: s.partitions,
        autopilot: s.autopilot,
        wait: s.wait,
        timeoutMillis: s.timeoutMillis,
        group: s.group,
        leaseSeconds: s.leaseSeconds,
        subscriptionMode: s.subscriptionMode,
        subscriptionFrom: s.subscriptionFrom,
        serverAutoAck: s.serverAutoAck,
        partitionRoute: !!s.queue && s.partition !== undefined,
        namespace: s.queue ? undefined : s.namespace,
        task: s.queue ? undefined : s.task,
      },
    };
  }

  /** popResult makes one pop and returns the messages with the lease and the autopilot echo; an empty pop (204) is an empty list. `maxBatch` caps the pop's batch, `maxTimeoutMillis` its long-poll timeout. Errors are thrown. */
  popResult(opts: { signal?: AbortSignal | undefined; maxBatch?: number | undefined; maxTimeoutMillis?: number | undefined } = {}): Promise<PopResult<T>> {
    return this.popWithCut(opts, undefined);
  }

  /** loopSource is this builder as the PopSource of a consume loop or iterator, whose pops carry the loop's cut: passed along, not through an AsyncLocalStorage, whose promise hooks (Node 20) would slow every promise of the process. */
  private loopSource(): PopSource<T> {
    return { popResult: (opts) => this.popWithCut(opts, opts.cut) };
  }

  /** popWithCut is popResult, half-closed at a loop's stop when `cut` is given (popcut.ts). */
  private async popWithCut(opts: { signal?: AbortSignal | undefined; maxBatch?: number | undefined; maxTimeoutMillis?: number | undefined }, cut: PopCut | undefined): Promise<PopResult<T>> {
    const { path, knobs } = this.popTarget();
    knobs.maxBatch = opts.maxBatch;
    if (opts.maxTimeoutMillis !== undefined) knobs.timeoutMillis = Math.min(knobs.timeoutMillis, opts.maxTimeoutMillis);
    const res = await this.core.transport.request<PopResponse | undefined>({
      method: "GET",
      path,
      query: popQuery(knobs, this.core.popAutopilot),
      longPoll: knobs.wait,
      timeoutMillis: knobs.wait ? knobs.timeoutMillis + 5000 : undefined,
      signal: opts.signal,
      cut,
    });
    const body = res.status === 204 ? undefined : res.body;
    if (!body || !Array.isArray(body.messages)) {
      return { messages: [], leaseId: "", consumerGroup: this.s.group ?? QUEUE_MODE, partitionsClaimed: 0 };
    }
    const queue = body.queue || this.s.queue || "";
    // The parsed answer is the SDK's own: each message takes its queue in place, not in a copy (the copies were 5% of a consume loop's CPU).
    const messages = body.messages as (WireMessage & { queue?: string })[];
    for (const m of messages) m.queue = queue;
    return {
      messages: messages as Message<T>[],
      leaseId: body.leaseId,
      consumerGroup: body.consumerGroup,
      partitionsClaimed: body.partitionsClaimed,
      leaseSeconds: body.leaseSeconds,
      leaseExpiresAt: body.leaseExpiresAt,
      autopilot: body.autopilot,
    };
  }

  /** pop makes one pop and returns its messages (empty on 204). It long-polls unless `.wait(false)`. */
  async pop(opts: { signal?: AbortSignal | undefined } = {}): Promise<Message<T>[]> {
    return (await this.popResult(opts)).messages;
  }

  /** consume starts a consume loop at once and returns its Consumer: the handler gets one message at a time with a signal aborted on a hard stop. Awaiting the Consumer waits for its end. A builder no pop can be made of (no queue nor namespace/task, or an InvalidNameError) throws here. */
  consume(handler: Handler<T>, opts: ConsumeOptions = {}): Consumer {
    this.popTarget();
    return new Consumer(this.core, this.loopSource(), this.s, { kind: "each", fn: handler as Handler<unknown> }, opts);
  }

  /** consumeBatch is consume with a handler per partition slice of each pop. */
  consumeBatch(handler: BatchHandler<T>, opts: ConsumeOptions = {}): Consumer {
    this.popTarget();
    return new Consumer(this.core, this.loopSource(), this.s, { kind: "batch", fn: handler as BatchHandler<unknown> }, opts);
  }

  /** messages (which throws at once, as consume does, for a builder no pop can be made of) iterates over leased messages: a message counts as handled (and is acked `completed` unless autoAck(false)) when the next one is requested; leaving the loop releases the rest of its pop with `retry`, the current message too; with autoAck(false) leaving releases nothing: every message handed over is the caller's to ack, and the rest of the pop redelivers when its lease expires (acking them `retry` yourself hands them back sooner, but a `retry` below a message not acked yet releases that one too). Aborting `signal` ends the iteration, and so do the builder's `limit(n)` (after n messages) and `idleMillis(ms)` (after ms without a message, counted from when the next one was asked for), as in Go. An ack call that fails for want of a broker (no answer, 5xx, 429) is reported to onError and resent, as the consume loop resends it, while the pop's lease lasts and `signal` is not aborted (docs/consuming.md §4); when the iteration ends (break, return, throw, `limit`, idle) no resend starts later than 5 s after it, so leaving never waits out the lease (the messages of an ack that never landed redeliver after it). */
  messages(opts: { signal?: AbortSignal | undefined } = {}): AsyncIterableIterator<Message<T>> {
    this.popTarget();
    return messageIterator<T>(this.core, this.loopSource(), this.s, opts.signal);
  }

  /** create configures the queue with the options given to `config()` (a full replace unless mode is `merge`). */
  async create(opts: { mode?: "merge" | "replace" | undefined } & RequestOptions = {}): Promise<ConfigureResult> {
    const body: Record<string, unknown> = { queue: this.requireQueue("create"), options: this.s.config ?? {} };
    if (this.s.namespace) body.namespace = this.s.namespace;
    if (this.s.task) body.task = this.s.task;
    if (opts.mode) body.mode = opts.mode;
    return (await this.core.transport.request<ConfigureResult>({ method: "POST", path: "/api/v1/configure", body, signal: opts.signal })).body;
  }

  /** delete deletes the queue with its partitions, messages, cursors and dead letters. */
  async delete(opts: RequestOptions = {}): Promise<DeleteQueueResult> {
    const q = this.requireQueue("delete");
    return (await this.core.transport.request<DeleteQueueResult>({ method: "DELETE", path: `/api/v1/resources/queues/${encodeURIComponent(q)}`, signal: opts.signal })).body;
  }

  /** depth is the queue's pending count for the builder's group (queue mode when none), with every partition, as admin.getQueueDepth. */
  async depth(opts: RequestOptions = {}): Promise<QueueDepth> {
    const q = this.requireQueue("depth");
    checkGroup("depth", this.s.group);
    return new Admin(this.core).getQueueDepth(q, this.s.group || undefined, opts);
  }

  /** dlq returns a builder over this queue's dead letters of `group` (empty or absent: the builder's group; neither: every group). */
  dlq(group?: string): DlqBuilder {
    return new DlqBuilder(this.core, { queue: this.requireQueue("dlq"), consumerGroup: group || this.s.group });
  }
}

interface DlqState {
  queue: string;
  consumerGroup?: string | undefined;
  partition?: string | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
  after?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
}

/** DlqBuilder pages through a queue's dead letters: `queue(q).dlq(group).limit(10).get()`. */
export class DlqBuilder {
  /** @internal */
  constructor(
    private readonly core: Core,
    private readonly s: DlqState,
  ) {}
  private with(p: Partial<DlqState>) {
    return new DlqBuilder(this.core, { ...this.s, ...p });
  }
  /** partition filters by partition name. */
  partition(p: string): DlqBuilder {
    return this.with({ partition: p });
  }
  /** limit is the page size (default 100). */
  limit(n: number): DlqBuilder {
    return this.with({ limit: n });
  }
  /** offset skips rows. Prefer after: dead letters replayed or filed between two pages move an offset. */
  offset(n: number): DlqBuilder {
    return this.with({ offset: n });
  }
  /** after starts the page after the row `key` names: the `nextAfter` of the page before (not with offset). */
  after(key: string): DlqBuilder {
    return this.with({ after: key });
  }
  /** from filters by failure time (inclusive). */
  from(t: string | Date): DlqBuilder {
    return this.with({ from: t instanceof Date ? t.toISOString() : t });
  }
  /** to filters by failure time. */
  to(t: string | Date): DlqBuilder {
    return this.with({ to: t instanceof Date ? t.toISOString() : t });
  }
  /** get fetches the page. */
  async get(opts: RequestOptions = {}): Promise<DlqList> {
    return listDlq(this.core, this.s, opts.signal);
  }
  /** all walks every dead letter the builder selects, newest first, page by page (its `limit` rows a page, default 100), as `admin.allDlq`, which `opts.signal` aborts as it aborts that: `for await (const m of lanes.queue(q).dlq(g).all()) …`. */
  all(opts: WalkOptions = {}): AsyncGenerator<DlqMessage, void, undefined> {
    return new Admin(this.core).allDlq(this.s, opts);
  }
}

/** listDlq is GET /api/v1/dlq with the given filters. */
export async function listDlq(core: Core, q: DlqState | Partial<DlqState>, signal?: AbortSignal): Promise<DlqList> {
  checkGroup("dlq", q.consumerGroup);
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== "") query.set(k, String(v));
  const qs = query.toString();
  return (await core.transport.request<DlqList>({ method: "GET", path: "/api/v1/dlq", query: qs || undefined, signal })).body;
}
