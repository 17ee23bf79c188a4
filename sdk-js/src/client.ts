// Lanes: the client. Holds the transport and the client defaults; everything else hangs off
// the builders it hands out.
import { Admin } from "./admin.js";
import { PushBuffer, type BufferOptions } from "./buffer.js";
import { ClientClosedError, LanesError, UnsentError } from "./errors.js";
import { Core, leaseIdsOf, type AckOptions, type AckTarget, type RenewResult } from "./internal/core.js";
import { Transport } from "./internal/http.js";
import { makeLog, type Logger } from "./internal/log.js";
import { Kv, listKvNamespaces } from "./kv.js";
import { Timers } from "./timers.js";
import type { AckStatus, Message } from "./message.js";
import { autopilotFromEnv } from "./pop.js";
import { DEFAULT_QUEUE_STATE, QueueBuilder } from "./queue.js";
import type { RequestOptions } from "./request-options.js";
import { DEFAULT_RETRY_POLICY } from "./retry.js";
import { TransactionBuilder } from "./transaction.js";
import type { AckResult, Health, KvNamespaceList } from "./types.js";

/** LanesOptions configure a client. Every field is optional: the URL defaults to `LANES_URL`, else http://localhost:6632. */
export interface LanesOptions {
  /** url is one broker URL, or several separated by commas (as `LANES_URL` may hold them). */
  url?: string | undefined;
  /** urls are several brokers on one PostgreSQL: requests fail over between them (docs/retries.md §4). */
  urls?: string[] | undefined;
  /**
   * bearerToken is sent as `Authorization: Bearer <token>`. A function is asked before every
   * attempt, so a client outlives its tokens (the broker refuses one past its exp): return a cached
   * token and fetch a new one before it expires. If it throws (or rejects), the call fails with that
   * error and sends nothing.
   */
  bearerToken?: string | (() => string | Promise<string>) | undefined;
  /** headers are extra headers on every request. */
  headers?: Record<string, string> | undefined;
  /** timeoutMillis is the per-attempt HTTP timeout (default 30000; 0 sets none, leaving a deadline or signal; a long-poll pop uses its own timeout + 5 s). */
  timeoutMillis?: number | undefined;
  /** retryAttempts is the number of retries after the first attempt on network errors, 408 and 5xx (default 2; 0 disables). */
  retryAttempts?: number | undefined;
  /** retryDelayMillis is the base of the exponential backoff (default 500). */
  retryDelayMillis?: number | undefined;
  /** maxRetryDelayMillis caps the backoff (default 8000). */
  maxRetryDelayMillis?: number | undefined;
  /** max429Attempts bounds 429 retries except on long-poll pops, which retry 429 without a bound (default 10). */
  max429Attempts?: number | undefined;
  /** maxRetryAfterMillis is the largest Retry-After the SDK sleeps; above it a RateLimitError is thrown (default 60000). */
  maxRetryAfterMillis?: number | undefined;
  /** healthRetryAfterMillis is how long a failing broker URL is skipped (default 5000). */
  healthRetryAfterMillis?: number | undefined;
  /** popAutopilot is the default of every builder's `.autopilot()`; defaults to false when LANES_SDK_POP_AUTOPILOT is off/false/0/no/disabled, else true. Read once here. */
  popAutopilot?: boolean | undefined;
  /** logger receives the SDK's log lines (console, pino, winston fit); by default warnings and errors go to the console (all levels when LANES_CLIENT_LOG=true); `null` silences everything. */
  logger?: Logger | null | undefined;
  /** fetch overrides the global fetch (the retry policy still wraps it). */
  fetch?: typeof fetch | undefined;
  /** env is read instead of process.env (tests). */
  env?: Record<string, string | undefined> | undefined;
}

/** Lanes is the client: `new Lanes({ url })`, then `lanes.queue('orders')…`. It installs no signal handlers; call `close()` to flush push buffers. A client with a push buffer also flushes it on the process's `beforeExit` (bounded like `close()`) as a safety net, until `close()` runs. */
export class Lanes {
  private readonly core: Core;
  private readonly buffers = new Map<string, PushBuffer>();
  private closed = false;
  private exitHookSet = false;
  private adminApi: Admin | undefined;

  constructor(options: LanesOptions | string | string[] = {}) {
    const o: LanesOptions = typeof options === "string" ? { url: options } : Array.isArray(options) ? { urls: options } : options;
    const env = o.env ?? process.env;
    // A comma separates several brokers in every URL given, LANES_URL included, as in Go's WithURL.
    const given = splitUrls(o.urls?.length ? o.urls : o.url ? [o.url] : []);
    const fromEnv = given.length ? given : splitUrls([env.LANES_URL ?? ""]);
    const urls = fromEnv.length ? fromEnv : ["http://localhost:6632"];
    for (const u of urls) checkBrokerUrl(u, o.fetch === undefined);
    const nonNeg = (name: string, v: number | undefined, d: number) => {
      if (v === undefined) return d;
      if (!Number.isFinite(v) || v < 0) throw new LanesError(`Lanes: ${name} must be a non-negative number, got ${v}`);
      return v;
    };
    const log = makeLog(o.logger, env);
    const timeoutMillis = nonNeg("timeoutMillis", o.timeoutMillis, 30_000);
    const transport = new Transport({
      urls,
      bearerToken: o.bearerToken,
      headers: o.headers,
      timeoutMillis,
      healthRetryAfterMillis: nonNeg("healthRetryAfterMillis", o.healthRetryAfterMillis, 5000),
      policy: {
        retryAttempts: Math.floor(nonNeg("retryAttempts", o.retryAttempts, DEFAULT_RETRY_POLICY.retryAttempts)),
        retryDelayMillis: nonNeg("retryDelayMillis", o.retryDelayMillis, DEFAULT_RETRY_POLICY.retryDelayMillis),
        maxRetryDelayMillis: nonNeg("maxRetryDelayMillis", o.maxRetryDelayMillis, DEFAULT_RETRY_POLICY.maxRetryDelayMillis),
        max429Attempts: Math.floor(nonNeg("max429Attempts", o.max429Attempts, DEFAULT_RETRY_POLICY.max429Attempts)),
        maxRetryAfterMillis: nonNeg("maxRetryAfterMillis", o.maxRetryAfterMillis, DEFAULT_RETRY_POLICY.maxRetryAfterMillis),
      },
      log,
      fetch: o.fetch,
    });
    this.core = new Core({ transport, log, popAutopilot: o.popAutopilot ?? autopilotFromEnv(env), timeoutMillis });
  }

  /** popAutopilot is the client's autopilot default (false when LANES_SDK_POP_AUTOPILOT switched it off at construction). */
  get popAutopilot(): boolean {
    return this.core.popAutopilot;
  }

  /** queue starts a builder for a queue; with no name it is a discovery builder (`.namespace(ns).task(t)`). `T` types message payloads. */
  queue<T = unknown>(name?: string): QueueBuilder<T> {
    return new QueueBuilder<T>(this.core, this, { ...DEFAULT_QUEUE_STATE, queue: name });
  }

  /** transaction starts an atomic bundle of pushes, acks, KV writes and timers. */
  transaction(): TransactionBuilder {
    return new TransactionBuilder(this.core);
  }

  /** ack acknowledges one message (POST /ack) or several (POST /ack/batch, one call per group). It throws AckError, carrying every result, when an item answered `success:false`. */
  ack(message: AckTarget, status?: AckStatus | boolean, opts?: AckOptions & RequestOptions): Promise<AckResult>;
  ack(messages: AckTarget[], status?: AckStatus | boolean, opts?: AckOptions & RequestOptions): Promise<AckResult[]>;
  async ack(messages: AckTarget | AckTarget[], status: AckStatus | boolean = "completed", opts: AckOptions & RequestOptions = {}): Promise<AckResult | AckResult[]> {
    if (Array.isArray(messages)) return this.core.ack(messages, status, opts, opts.signal);
    const [r] = await this.core.ack([messages], status, opts, opts.signal);
    return r!;
  }

  /** renew extends the leases of messages (or lease ids), each distinct lease once; `seconds` defaults to the broker's 60. */
  async renew(targets: Message<unknown> | AckTarget | string | (Message<unknown> | AckTarget | string)[], opts: { seconds?: number | undefined } & RequestOptions = {}): Promise<RenewResult[]> {
    return this.core.renew(leaseIdsOf(Array.isArray(targets) ? targets : [targets]), opts.seconds, opts.signal);
  }

  /** admin is the management API (queues, consumer groups, DLQ, messages, status). */
  get admin(): Admin {
    this.adminApi ??= new Admin(this.core);
    return this.adminApi;
  }

  /** kv returns the helpers of one KV namespace. */
  kv(namespace: string): Kv {
    return new Kv(this.core, namespace);
  }

  /** kvNamespaces lists KV namespaces. */
  kvNamespaces(opts: RequestOptions = {}): Promise<KvNamespaceList> {
    return listKvNamespaces(this.core, opts.signal);
  }

  /** timers returns the timer helpers of one destination queue. */
  timers(queue: string): Timers {
    return new Timers(this.core, queue);
  }

  /** health is GET /health. */
  async health(opts: RequestOptions = {}): Promise<Health> {
    return (await this.core.transport.request<Health>({ method: "GET", path: "/health", signal: opts.signal })).body;
  }

  /** @internal shared buffer per (queue, partition) */
  buffer(queue: string, partition: string | undefined, opts: BufferOptions): PushBuffer {
    if (this.closed) throw new ClientClosedError("buffer: client is closed");
    const key = `${queue}/${partition ?? "Default"}`;
    let b = this.buffers.get(key);
    if (!b) {
      b = new PushBuffer(this.core, queue, partition, opts);
      this.buffers.set(key, b);
      if (!this.exitHookSet) {
        this.exitHookSet = true;
        process.on("beforeExit", this.flushBeforeExit);
      }
    }
    return b;
  }

  /**
   * flushBeforeExit is the safety net for a script that ends without close(): Node emits
   * beforeExit once the event loop is empty (the flush timers do not hold it), and the close's
   * own requests keep the process alive until they end.
   */
  private readonly flushBeforeExit = (): void => {
    const waiting = this.bufferStats().totalBufferedMessages;
    if (waiting === 0) return;
    this.core.log.warn(`exit: flushing ${waiting} buffered message(s); await lanes.close() before the process ends`);
    this.close().catch((err: unknown) => this.core.log.error(`exit: ${err instanceof Error ? err.message : String(err)}`));
  };

  /** flushAll sends everything waiting in the push buffers, all at once, bounded by `timeoutMillis` (default 30 s, as Python's `flush_all()`). It rejects with UnsentError (`.unsent`, the total left) when time runs out; the items stay buffered and are retried. Aborting `signal` rejects with its reason at once and only ends this wait: the buffers go on flushing. */
  async flushAll(opts: { timeoutMillis?: number | undefined } & RequestOptions = {}): Promise<void> {
    opts.signal?.throwIfAborted();
    const deadline = Date.now() + (opts.timeoutMillis ?? 30_000);
    const left = await settleAll([...this.buffers.values()].map((b) => b.flushUntil(deadline, opts.signal)));
    const unsent = left.reduce((a, b) => a + b, 0);
    if (unsent > 0) throw new UnsentError(unsent);
  }

  /** bufferStats reports the push buffers: how many (one per queue and partition), the items waiting in them (not sent yet), and the batches they sent (a batch halved to set a refused item apart counts once; one that failed and waits for a retry does not). Go `client.BufferStats()`, Python `client.buffer_stats()`. */
  bufferStats(): { activeBuffers: number; totalBufferedMessages: number; flushesPerformed: number } {
    let total = 0;
    let flushes = 0;
    for (const b of this.buffers.values()) {
      total += b.size;
      flushes += b.flushes;
    }
    return { activeBuffers: this.buffers.size, totalBufferedMessages: total, flushesPerformed: flushes };
  }

  /** close refuses new buffers and buffer pushes (ClientClosedError), then flushes the push buffers, all at once, bounded by `timeoutMillis` (default 30 s). It rejects with UnsentError (`.unsent`) when messages are left; they stay buffered and calling close() again tries again. Aborting `signal` (an aborted one too) gives up the flush at once as the timeout would, the client closed all the same, and rejects with its reason. Direct calls keep working: close releases nothing they use. Consumers are stopped by their own `stop()`. */
  async close(opts: { timeoutMillis?: number | undefined } & RequestOptions = {}): Promise<void> {
    this.closed = true;
    process.off("beforeExit", this.flushBeforeExit);
    const deadline = Date.now() + (opts.timeoutMillis ?? 30_000);
    const left = await settleAll([...this.buffers.values()].map((b) => b.close(deadline, opts.signal)));
    // An aborted signal rejects as every buffer's close does, without a buffer too.
    opts.signal?.throwIfAborted();
    const unsent = left.reduce((a, b) => a + b, 0);
    if (unsent > 0) throw new UnsentError(unsent);
  }
}

// The ports the Fetch standard blocks (https://fetch.spec.whatwg.org/#bad-port): Node's fetch
// refuses them before connecting, so a broker there is unreachable through it and every write to
// it would end as if its answer were lost. A fetch of the caller's own may allow them.
const FETCH_BLOCKED_PORTS = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110,
  111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532,
  540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061,
  6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

/** settleAll is Promise.all that waits for every promise before it rejects with the first reason, so an abort that ends several buffers' waits returns once each has given up. */
async function settleAll<T>(promises: Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(promises);
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

function checkBrokerUrl(u: string, globalFetch: boolean): void {
  if (!/^https?:\/\//.test(u)) throw new LanesError(`Lanes: bad broker URL ${JSON.stringify(u)} (want http:// or https://)`);
  let port: number;
  try {
    port = Number(new URL(u).port);
  } catch {
    throw new LanesError(`Lanes: bad broker URL ${JSON.stringify(u)} (not a URL)`);
  }
  if (globalFetch && FETCH_BLOCKED_PORTS.has(port)) {
    throw new LanesError(
      `Lanes: broker URL ${JSON.stringify(u)} uses port ${port}, which Node's fetch refuses to connect to (the Fetch standard's blocked ports): run the broker on another port`,
    );
  }
}

/** splitUrls splits each entry on commas (several brokers in one string, as LANES_URL may hold them) and drops blank parts. */
function splitUrls(entries: string[]): string[] {
  return entries.flatMap((e) => e.split(",")).map((u) => u.trim()).filter((u) => u !== "");
}
