// Core is what every builder shares: the transport, the log, the client defaults, and the
// low-level calls (push, ack, renew) the builders and the consume loop are made of.
import { AckError, InvalidItemError, LanesError, PushError, UnexpectedAnswerError, resultsOf } from "../errors.js";
import type { AckStatus, Message } from "../message.js";
import type { AckItem, AckResult, LeaseExtendResult, WirePushItem, WirePushResult } from "../types.js";
import type { Transport } from "./http.js";
import type { Log } from "./log.js";
import { checkGroup } from "../names.js";
import { jsonProblem } from "./payload.js";
import { uuidv7 } from "./uuid.js";

/** PushItem is one item to push: an envelope `{data}` or `{payload}` with optional string ids (no other keys), or a bare JSON value (any other object is a bare value, stored whole). */
export type PushItem<T = unknown> =
  | { data: T; transactionId?: string | undefined; traceId?: string | undefined }
  | { payload: T; transactionId?: string | undefined; traceId?: string | undefined }
  | T;

/** PushResult is the broker's verdict on one pushed item. */
export interface PushResult {
  index: number;
  messageId: WirePushResult["message_id"];
  transactionId: WirePushResult["transaction_id"];
  queue: WirePushResult["queueName"];
  status: WirePushResult["status"];
  error?: string | undefined;
}

/** AckTarget is what an acknowledgement needs; a Message fits. */
export interface AckTarget {
  transactionId: string;
  partitionId: string;
  leaseId?: string | null | undefined;
  consumerGroup?: string | null | undefined;
}

/** AckOptions name the group (default: the message's own group) and a failure reason. `consumerGroup` is an alias of `group`. */
export interface AckOptions {
  group?: string | undefined;
  consumerGroup?: string | undefined;
  error?: string | undefined;
  /** withoutLease sends no leaseId: a lease-less ack that works after the lease expired (and can clobber another worker's batch). */
  withoutLease?: boolean | undefined;
}

/** RenewResult is the outcome of extending one lease. */
export interface RenewResult {
  leaseId: string;
  success: boolean;
  renewed: number;
  newExpiresAt: string | null;
}

export const QUEUE_MODE = "__QUEUE_MODE__";
const ACK_STATUSES = new Set<AckStatus>(["completed", "failed", "retry", "dlq"]);

/** normalizeAckStatus maps `true`/`false` to completed/failed and refuses unknown strings (the broker would treat them as `failed`). */
export function normalizeAckStatus(status: AckStatus | boolean): AckStatus {
  if (status === true) return "completed";
  if (status === false) return "failed";
  if (!ACK_STATUSES.has(status)) throw new LanesError(`ack: unknown status ${JSON.stringify(status)} (want completed, failed, retry or dlq)`);
  return status;
}

const ITEM_KEYS = new Set(["data", "payload", "transactionId", "traceId"]);

/** isObject: a JSON object (not null, not an array). */
function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** isEnvelope: an object is a push item envelope when it has `data` or `payload` and no key but `data`, `payload`, `transactionId` and `traceId`; any other value (an event with a `data` field among others) is a bare payload, stored whole. */
function isEnvelope(item: unknown): item is { data?: unknown; payload?: unknown; transactionId?: unknown; traceId?: unknown } {
  if (!isObject(item)) return false;
  const keys = Object.keys(item);
  return (keys.includes("data") || keys.includes("payload")) && keys.every((k) => ITEM_KEYS.has(k));
}

/** optionalId reads an envelope's id: a string, or absent (undefined, null, ""). Anything else is an error, never replaced. */
function optionalId(index: number, name: string, v: unknown): string | undefined {
  if (v === undefined || v === null || v === "") return undefined;
  if (typeof v !== "string") throw new InvalidItemError(index, `${name} must be a string, got ${typeof v} ${JSON.stringify(String(v))}`);
  return v;
}

/** toWireItem turns push item number `index` into the wire's `{queue, partition, payload, transactionId}`, minting a UUIDv7 when the id is absent. It throws InvalidItemError for an item that would not be stored as given. */
export function toWireItem(queue: string, partition: string | undefined, item: unknown, index = 0): WirePushItem & { transactionId: string } {
  let payload: unknown = item;
  let transactionId: string | undefined;
  let traceId: string | undefined;
  if (isEnvelope(item)) {
    if ("data" in item && "payload" in item) throw new InvalidItemError(index, "has both data and payload (use one)");
    payload = "data" in item ? item.data : item.payload;
    transactionId = optionalId(index, "transactionId", item.transactionId);
    traceId = optionalId(index, "traceId", item.traceId);
  }
  const problem = jsonProblem(payload);
  if (problem) throw new InvalidItemError(index, problem);
  const out: WirePushItem & { transactionId: string } = {
    queue,
    payload: (payload === undefined ? null : payload) as WirePushItem["payload"],
    transactionId: transactionId ?? uuidv7(),
  };
  if (partition !== undefined) out.partition = partition;
  if (traceId !== undefined) out.traceId = traceId;
  return out;
}

/** toWireItems shapes every item of a call, so one bad item fails the call before anything is sent or buffered. */
export function toWireItems(queue: string, partition: string | undefined, items: unknown[]): (WirePushItem & { transactionId: string })[] {
  // A JS caller's push("x") or push({data}) would otherwise fail as a bare TypeError, or send a string's characters.
  if (!Array.isArray(items)) throw new InvalidItemError(undefined, "want an array of items");
  return items.map((it, i) => toWireItem(queue, partition, it, i));
}

export interface CoreOptions {
  transport: Transport;
  log: Log;
  popAutopilot: boolean;
  timeoutMillis: number;
}

export class Core {
  readonly transport: Transport;
  readonly log: Log;
  readonly popAutopilot: boolean;
  readonly timeoutMillis: number;

  constructor(o: CoreOptions) {
    this.transport = o.transport;
    this.log = o.log;
    this.popAutopilot = o.popAutopilot;
    this.timeoutMillis = o.timeoutMillis;
  }

  /** pushWire sends already-shaped wire items; it throws PushError when an item is `failed`. */
  async pushWire(items: ReturnType<typeof toWireItem>[], signal?: AbortSignal): Promise<PushResult[]> {
    if (items.length === 0) return [];
    const res = await this.transport.request<WirePushResult[]>({ method: "POST", path: "/api/v1/push", body: { items }, signal });
    const wire = resultsOf<WirePushResult>("push", res.body, items.length, "items", res.body);
    const results: PushResult[] = wire.map((r) => {
      const out: PushResult = { index: r.index, messageId: r.message_id, transactionId: r.transaction_id, queue: r.queueName, status: r.status };
      if (r.error !== undefined) out.error = r.error;
      return out;
    });
    const buffered = results.filter((r) => r.status === "buffered");
    if (buffered.length > 0) {
      this.log.warn(`push: ${buffered.length} item(s) buffered on the broker's disk spool (PostgreSQL unreachable or push maintenance on); they drain later`, { queue: buffered[0]?.queue });
    }
    if (results.some((r) => r.status === "failed")) throw new PushError(results);
    return results;
  }

  /** ack acknowledges targets: one → POST /ack, several → /ack/batch per group. Throws AckError (with every result) when an item answered success:false. */
  async ack(targets: AckTarget[], status: AckStatus | boolean, opts: AckOptions = {}, signal?: AbortSignal): Promise<AckResult[]> {
    const st = normalizeAckStatus(status);
    for (const t of targets) {
      if (!t.transactionId || !t.partitionId) throw new LanesError("ack: every message needs transactionId and partitionId");
      checkGroup("ack", opts.group ?? opts.consumerGroup ?? t.consumerGroup);
    }
    const results = await this.ackItems(
      targets.map((t) => ({ target: opts.withoutLease ? { ...t, leaseId: undefined } : t, status: st, error: opts.error })),
      opts.group ?? opts.consumerGroup,
      signal,
    );
    if (results.some((r) => !r.success)) throw new AckError(results);
    return results;
  }

  /** ackItems sends per-item statuses without checking `success` (the consume loop reports failures itself). */
  async ackItems(items: { target: AckTarget; status: AckStatus; error?: string | undefined }[], group?: string, signal?: AbortSignal): Promise<AckResult[]> {
    if (items.length === 0) return [];
    const wireItem = (i: (typeof items)[number]): AckItem => {
      const w: AckItem = { transactionId: i.target.transactionId, partitionId: i.target.partitionId, status: i.status };
      if (i.target.leaseId) w.leaseId = i.target.leaseId;
      if (i.error !== undefined) w.error = i.error;
      return w;
    };
    const groupOf = (t: AckTarget) => group ?? (t.consumerGroup || QUEUE_MODE);
    if (items.length === 1) {
      const only = items[0]!;
      const res = await this.transport.request<AckResult[] | AckResult>({
        method: "POST",
        path: "/api/v1/ack",
        body: { ...wireItem(only), consumerGroup: groupOf(only.target) },
        signal,
      });
      // The spec's answer is an array of one result; brokers before it sent the object alone.
      // Any other shape is a broker fault, not a result.
      const results: unknown[] = Array.isArray(res.body) ? res.body : [res.body];
      if (results.length !== 1 || !isObject(results[0])) throw new UnexpectedAnswerError(`ack: /api/v1/ack answered ${Array.isArray(res.body) ? `an array of ${res.body.length}` : typeof res.body}, want an array of one result`, { body: res.body });
      return [results[0] as AckResult];
    }
    const byGroup = new Map<string, number[]>();
    items.forEach((it, idx) => {
      const g = groupOf(it.target);
      const list = byGroup.get(g);
      if (list) list.push(idx);
      else byGroup.set(g, [idx]);
    });
    const out: AckResult[] = new Array(items.length);
    for (const [g, idxs] of byGroup) {
      const res = await this.transport.request<AckResult[]>({
        method: "POST",
        path: "/api/v1/ack/batch",
        body: { consumerGroup: g, acknowledgments: idxs.map((i) => wireItem(items[i]!)) },
        signal,
      });
      const body = resultsOf<AckResult>("ack", res.body, idxs.length, "items", res.body);
      idxs.forEach((orig, k) => {
        out[orig] = { ...body[k]!, index: orig };
      });
    }
    return out;
  }

  /** renew extends each distinct lease once; `seconds` absent or 0 asks for the broker's default (60 s), as in Go and Python. */
  async renew(leaseIds: string[], seconds?: number, signal?: AbortSignal): Promise<RenewResult[]> {
    const ids = [...new Set(leaseIds.filter((l) => l))];
    const out: RenewResult[] = [];
    for (const id of ids) {
      const res = await this.transport.request<LeaseExtendResult>({
        method: "POST",
        path: `/api/v1/lease/${encodeURIComponent(id)}/extend`,
        // 0 or below is the broker's default 60, as Go sends none, not a 1 s lease.
        body: seconds !== undefined && seconds > 0 ? { seconds: Math.max(1, Math.ceil(seconds)) } : {},
        signal,
      });
      out.push({ leaseId: id, success: res.body.success, renewed: res.body.renewed, newExpiresAt: res.body.newExpiresAt ?? null });
    }
    return out;
  }
}

/** leaseIdsOf collects lease ids from messages or strings. */
export function leaseIdsOf(targets: (Message<unknown> | AckTarget | string)[]): string[] {
  return targets.map((t) => (typeof t === "string" ? t : (t.leaseId ?? ""))).filter((l) => l !== "");
}
