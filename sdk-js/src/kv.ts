// KV state (`/api/v1/kv`) and timers (`/api/v1/timers`) helpers.
import { LanesError } from "./errors.js";
import type { Core } from "./internal/core.js";
import { kvOpsIdempotent } from "./retry.js";
import type { KvListResult, KvNamespaceList, KvOperation, KvResult, Timer, TimerList, TimerOperation, TimerResult } from "./types.js";

/** KvExpiry says how long a written key lives: `{ttlSeconds}` or `{forever: true}` (the broker requires exactly one). */
export type KvExpiry = { ttlSeconds: number } | { forever: true };

/** kvWriteOp builds a put / putIfAbsent operation. */
export function kvWriteOp(op: "put" | "putIfAbsent", ns: string, key: string, value: unknown, expiry: KvExpiry, opts: { expect?: number; required?: boolean }): KvOperation {
  if (!expiry || (!("forever" in expiry) && !(expiry.ttlSeconds > 0))) throw new LanesError("kv: give {ttlSeconds: n > 0} or {forever: true}");
  const out: KvOperation = { op, ns, key, value: value as KvOperation["value"], ...("forever" in expiry ? { forever: true } : { ttlSeconds: expiry.ttlSeconds }) };
  if (opts.expect !== undefined) out.expect = opts.expect;
  if (opts.required !== undefined) out.required = opts.required;
  return out;
}

/** Kv is one KV namespace: `lanes.kv('sessions')`. Every call is one `POST /api/v1/kv`; business outcomes (`applied:false`) are results, not errors. */
export class Kv {
  /** @internal */
  constructor(
    private readonly core: Core,
    readonly namespace: string,
  ) {}

  /** batch runs raw operations (each needs `ns`) in one call and returns index-aligned results. */
  async batch(operations: KvOperation[]): Promise<KvResult[]> {
    const res = await this.core.transport.request<{ results: KvResult[] }>({ method: "POST", path: "/api/v1/kv", body: { operations }, notIdempotent: !kvOpsIdempotent(operations) });
    return res.body.results;
  }
  private async one(op: KvOperation): Promise<KvResult> {
    const [r] = await this.batch([op]);
    if (!r) throw new LanesError("kv: broker answered no result");
    return r;
  }
  /** get reads a key (`found`, `value`, `version`). */
  get(key: string): Promise<KvResult> {
    return this.one({ op: "get", ns: this.namespace, key });
  }
  /** getMany reads several keys (`rows`, `missing`). */
  getMany(keys: string[]): Promise<KvResult> {
    return this.one({ op: "getMany", ns: this.namespace, keys });
  }
  /** getPrefix pages through keys with a prefix (`rows`, `truncated`, `nextAfter`). */
  getPrefix(prefix: string, opts: { after?: string; limit?: number; keysOnly?: boolean } = {}): Promise<KvResult> {
    return this.one({ op: "getPrefix", ns: this.namespace, prefix, ...opts });
  }
  /** put writes a key (`expect` 0 = must not exist, N = version must be N). */
  put(key: string, value: unknown, expiry: KvExpiry, opts: { expect?: number; required?: boolean } = {}): Promise<KvResult> {
    return this.one(kvWriteOp("put", this.namespace, key, value, expiry, opts));
  }
  /** putIfAbsent writes a key only when it does not exist. */
  putIfAbsent(key: string, value: unknown, expiry: KvExpiry): Promise<KvResult> {
    return this.one(kvWriteOp("putIfAbsent", this.namespace, key, value, expiry, {}));
  }
  /** delete removes a key. */
  delete(key: string, opts: { expect?: number } = {}): Promise<KvResult> {
    return this.one({ op: "delete", ns: this.namespace, key, ...opts });
  }
  /** incr adds `delta` to a numeric key (created at 0). */
  incr(key: string, delta: number, expiry: KvExpiry, opts: { min?: number; max?: number } = {}): Promise<KvResult> {
    return this.one({ op: "incr", ns: this.namespace, key, delta, ...("forever" in expiry ? { forever: true } : { ttlSeconds: expiry.ttlSeconds }), ...opts });
  }
  /** list pages through the namespace (console route). */
  async list(opts: { prefix?: string; after?: string; limit?: number; keysOnly?: boolean; includeExpired?: boolean } = {}): Promise<KvListResult> {
    return (await this.core.transport.request<KvListResult>({ method: "POST", path: "/api/v1/resources/kv/list", body: { namespace: this.namespace, ...opts } })).body;
  }
}

/** listKvNamespaces lists KV namespaces with their key counts. */
export async function listKvNamespaces(core: Core): Promise<KvNamespaceList> {
  return (await core.transport.request<KvNamespaceList>({ method: "GET", path: "/api/v1/resources/kv/namespaces" })).body;
}

/** TimerSchedule describes a timer: `payload` (any JSON) is pushed to the queue after `delayMillis`. */
export interface TimerSchedule {
  delayMillis: number;
  payload?: unknown;
  partition?: string;
  /** transactionId of the pushed message (deterministic ids make firing idempotent). */
  transactionId?: string;
}

/** timerScheduleOp builds a schedule operation; the payload travels as base64 of its JSON. */
export function timerScheduleOp(queue: string, key: string, s: TimerSchedule, op: "schedule" | "reschedule" = "schedule"): TimerOperation {
  const out: TimerOperation = { op, queue, timerKey: key, delayMs: Math.max(0, Math.round(s.delayMillis)) };
  out.payload = Buffer.from(JSON.stringify(s.payload ?? null), "utf8").toString("base64");
  if (s.partition !== undefined) out.partition = s.partition;
  if (s.transactionId !== undefined) out.txn = s.transactionId;
  return out;
}

/** Timers is the timers of one destination queue: `lanes.timers('reminders')`. */
export class Timers {
  /** @internal */
  constructor(
    private readonly core: Core,
    readonly queue: string,
  ) {}
  /** batch runs raw timer operations and returns index-aligned results. */
  async batch(operations: TimerOperation[]): Promise<TimerResult[]> {
    return (await this.core.transport.request<{ results: TimerResult[] }>({ method: "POST", path: "/api/v1/timers", body: { operations } })).body.results;
  }
  private async one(op: TimerOperation): Promise<TimerResult> {
    const [r] = await this.batch([op]);
    if (!r) throw new LanesError("timers: broker answered no result");
    return r;
  }
  /** schedule creates or replaces timer `key`. */
  schedule(key: string, s: TimerSchedule): Promise<TimerResult> {
    return this.one(timerScheduleOp(this.queue, key, s));
  }
  /** reschedule replaces timer `key` and resets its attempts. */
  reschedule(key: string, s: TimerSchedule): Promise<TimerResult> {
    return this.one(timerScheduleOp(this.queue, key, s, "reschedule"));
  }
  /** cancel deletes timer `key` (`absent` may mean it already fired). */
  async cancel(key: string): Promise<TimerResult> {
    return (await this.core.transport.request<TimerResult>({ method: "DELETE", path: `/api/v1/timers/${encodeURIComponent(this.queue)}/${encodeURIComponent(key)}` })).body;
  }
  /** get reads timer `key` (`found:false` when missing). */
  async get(key: string): Promise<Timer> {
    return (await this.core.transport.request<Timer>({ method: "GET", path: `/api/v1/timers/${encodeURIComponent(this.queue)}/${encodeURIComponent(key)}` })).body;
  }
  /** list pages through the queue's timers. */
  async list(opts: { limit?: number; after?: string; prefix?: string } = {}): Promise<TimerList> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts)) if (v !== undefined) q.set(k, String(v));
    return (await this.core.transport.request<TimerList>({ method: "GET", path: `/api/v1/timers/${encodeURIComponent(this.queue)}`, query: q.toString() || undefined })).body;
  }
}
