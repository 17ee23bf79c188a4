// Timers helpers (`/api/v1/timers`).
import { InvalidValueError, LanesError, resultsOf } from "./errors.js";
import type { Core } from "./internal/core.js";
import { jsonProblem } from "./internal/payload.js";
import { uuidv7 } from "./internal/uuid.js";
import type { RequestOptions } from "./request-options.js";
import type { Timer, TimerList, TimerOperation, TimerResult } from "./types.js";

/** TimerSchedule describes a timer: `payload` (any JSON; `{}` when left out) is pushed to the queue after `delayMillis`. */
export interface TimerSchedule {
  delayMillis: number;
  payload?: unknown;
  partition?: string | undefined;
  /** transactionId of the pushed message; without one a UUIDv7 is minted when the operation is built, so a resend after a lost answer fires once. */
  transactionId?: string | undefined;
}

/** timerScheduleOp builds a schedule operation (InvalidValueError for a payload JSON cannot hold as given); the payload travels as base64 of its JSON. The `txn` is fixed here, before the first attempt: a resend that got a new one would fire the timer twice. */
export function timerScheduleOp(queue: string, key: string, s: TimerSchedule, op: "schedule" | "reschedule" = "schedule"): TimerOperation {
  const problem = jsonProblem(s.payload);
  if (problem) throw new InvalidValueError(`timer ${op} ${JSON.stringify(key)}: ${problem}`);
  const out: TimerOperation = { op, queue, timerKey: key, delayMs: Math.max(0, Math.round(s.delayMillis)) };
  // Without a payload the field is left out and the broker fires `{}`, as Go does; an explicit null is sent.
  if (s.payload !== undefined) out.payload = Buffer.from(JSON.stringify(s.payload), "utf8").toString("base64");
  if (s.partition !== undefined) out.partition = s.partition;
  out.txn = s.transactionId || uuidv7();
  return out;
}

/** timerOp builds one operation for `timers(q).batch`, for any queue, as Go's `lanes.TimerSchedule` and Python's `lanes.timer_op` do: a schedule or reschedule takes its TimerSchedule (checked and encoded as `schedule()` does, its `transactionId` minted here when absent), a cancel nothing. */
export function timerOp(op: "schedule" | "reschedule", queue: string, key: string, s: TimerSchedule): TimerOperation;
export function timerOp(op: "cancel", queue: string, key: string): TimerOperation;
export function timerOp(op: "schedule" | "reschedule" | "cancel", queue: string, key: string, s?: TimerSchedule): TimerOperation {
  if (op === "cancel") return { op, queue, timerKey: key };
  if (!s) throw new LanesError(`timerOp: a ${op} needs its { delayMillis, … }`);
  return timerScheduleOp(queue, key, s, op);
}

/** Timers is the timers of one destination queue: `lanes.timers('reminders')`. Every call takes `{ signal }` last (RequestOptions). */
export class Timers {
  /** @internal */
  constructor(
    private readonly core: Core,
    readonly queue: string,
  ) {}
  /** batch runs timer operations (built with `timerOp`, any queue) in one request and returns index-aligned results. */
  async batch(operations: TimerOperation[], opts: RequestOptions = {}): Promise<TimerResult[]> {
    const res = await this.core.transport.request<{ results: TimerResult[] } | undefined>({ method: "POST", path: "/api/v1/timers", body: { operations }, signal: opts.signal });
    return resultsOf<TimerResult>("timers", res.body?.results, operations.length, "operations", res.body);
  }
  private async one(op: TimerOperation, opts: RequestOptions): Promise<TimerResult> {
    const [r] = await this.batch([op], opts);
    return r!;
  }
  /** schedule creates or replaces timer `key`. */
  async schedule(key: string, s: TimerSchedule, opts: RequestOptions = {}): Promise<TimerResult> {
    return this.one(timerScheduleOp(this.queue, key, s), opts);
  }
  /** reschedule replaces timer `key` and resets its attempts. */
  async reschedule(key: string, s: TimerSchedule, opts: RequestOptions = {}): Promise<TimerResult> {
    return this.one(timerScheduleOp(this.queue, key, s, "reschedule"), opts);
  }
  /** cancel deletes timer `key` (`absent` may mean it already fired). */
  async cancel(key: string, opts: RequestOptions = {}): Promise<TimerResult> {
    return (await this.core.transport.request<TimerResult>({ method: "DELETE", path: `/api/v1/timers/${encodeURIComponent(this.queue)}/${encodeURIComponent(key)}`, signal: opts.signal })).body;
  }
  /** get reads timer `key` (`found:false` when missing). */
  async get(key: string, opts: RequestOptions = {}): Promise<Timer> {
    return (await this.core.transport.request<Timer>({ method: "GET", path: `/api/v1/timers/${encodeURIComponent(this.queue)}/${encodeURIComponent(key)}`, signal: opts.signal })).body;
  }
  /** list pages through the queue's timers; `{ signal }` comes after the page's query, as in the listings. */
  async list(query: { limit?: number | undefined; after?: string | undefined; prefix?: string | undefined } = {}, opts: RequestOptions = {}): Promise<TimerList> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
    return (await this.core.transport.request<TimerList>({ method: "GET", path: `/api/v1/timers/${encodeURIComponent(this.queue)}`, query: q.toString() || undefined, signal: opts.signal })).body;
  }
}
