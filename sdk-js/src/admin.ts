// Admin: queues, consumer groups (seek, delete, subscription), DLQ, messages, status. Every
// method returns the generated response type of its route.
import type { Core } from "./internal/core.js";
import { checkGroup } from "./names.js";
import { listDlq } from "./queue.js";
import type { RequestOptions } from "./request-options.js";
import type {
  BufferStatus,
  ConfigureResult,
  ConsumerGroupDeleteResult,
  ConsumerGroupDetail,
  ConsumerGroupSummary,
  DeleteMessageResult,
  DeleteQueueResult,
  DlqList,
  DlqMessage,
  DlqPurgeResult,
  DlqReplayRequest,
  DlqReplayResult,
  Health,
  LaggingConsumerGroup,
  Maintenance,
  MessageDetail,
  MessageList,
  MessageListItem,
  MessageListQuery,
  Metrics,
  NamespaceList,
  Overview,
  QueueDepth,
  QueueDetail,
  QueueList,
  QueueOptions,
  QueueStatus,
  QueueStatusList,
  QueueSummary,
  SeekPartitionResult,
  SeekQueueResult,
  StatusOverview,
  SubscriptionUpdateResult,
  TaskList,
} from "./types.js";

/** SeekTarget moves a group's cursor to the end or to an instant (segment-granular). */
export type SeekTarget = { toEnd: true } | { timestamp: string | Date };

type Query = Record<string, string | number | boolean | Date | undefined | null>;

function qs(q: Query | undefined): string | undefined {
  if (!q) return undefined;
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === null || v === "") continue;
    p.set(k, v instanceof Date ? v.toISOString() : String(v));
  }
  return p.toString() || undefined;
}

const e = encodeURIComponent;

/**
 * wholeListingPage is the page the calls that return a whole listing ask for, the largest the
 * broker answers: every page costs the broker a fixed part (a queue status's totals, a pass over
 * the group list's keys), and paging through 100,000 partitions' status took 61 s at 1,000 rows a
 * page, 7 s at 10,000.
 */
export const wholeListingPage = 10000;

/** Where a page of a listing starts: after the row the broker's key names, else at an offset (from the first row when neither). */
export type PagePlace = { offset?: number | undefined; after?: string | undefined };

/** The paging fields of a listing answered as an object (a broker before paging sends none; one before keyed paging no nextAfter). */
export type BodyPaging = { truncated?: boolean | undefined; nextOffset?: number | null | undefined; nextAfter?: string | null | undefined };

/** nextByKey is the page after the one at `at` by the key `after` it named (none: a page asked for by key must name one). */
function nextByKey(at: PagePlace, after: string | null | undefined): PagePlace {
  if (!after) throw new Error("a truncated listing page asked for by key names no key for the next");
  if (after === at.after) throw new Error(`a listing page after ${after} says the next starts after it again`);
  return { after };
}

/** nextByOffset is the page after the one at `at` by the offset it named. */
function nextByOffset(at: PagePlace, next: number): PagePlace {
  if (next <= (at.offset ?? 0)) throw new Error(`a listing page at offset ${at.offset ?? 0} says the next starts at ${next}`);
  return { offset: next };
}

/**
 * bodyNext is where the page after one answered as an object starts, by its truncated, nextAfter
 * and nextOffset fields; undefined when none follows (a truncated page with neither: a broker
 * before paging). The key comes first, as in headerNext.
 */
export function bodyNext(page: BodyPaging, at: PagePlace): PagePlace | undefined {
  if (page.truncated !== true) return undefined;
  if (page.nextAfter || at.after !== undefined) return nextByKey(at, page.nextAfter);
  return typeof page.nextOffset === "number" ? nextByOffset(at, page.nextOffset) : undefined;
}

/**
 * bodyPages asks for page after page of a listing answered as an object, from the first until one
 * says no more follow, and returns the first with every later page's `key` rows appended to its
 * own: the broker answers the label, KV namespace and partition listings a page at a time, and
 * the calls that return a whole listing must not return a cut one.
 */
export async function bodyPages<T extends BodyPaging>(fetchPage: (at: PagePlace) => Promise<T>, key: keyof T): Promise<T> {
  let whole: T | undefined;
  let at: PagePlace | undefined = {};
  while (at !== undefined) {
    const body = await fetchPage(at);
    if (whole === undefined) whole = body;
    else (whole[key] as unknown[] | undefined)?.push(...((body[key] as unknown[] | undefined) ?? []));
    at = bodyNext(body, at);
  }
  const out = whole as T;
  if (out.truncated !== undefined) Object.assign(out, { truncated: false, nextOffset: null });
  if (out.nextAfter !== undefined) Object.assign(out, { nextAfter: null });
  return out;
}

/**
 * headerNext is where the page after one answered as a bare array or keyed by queue starts, by its
 * X-Lanes-Truncated, X-Lanes-Next-After and X-Lanes-Next-Offset headers; undefined when none
 * follows. The key comes first: the group, lagging and one-group listings name the next page by
 * key, and an offset skips or repeats rows when rows before it come or go between two pages; a
 * broker before keyed paging gives only the offset.
 */
export function headerNext(headers: Headers, at: PagePlace): PagePlace | undefined {
  if (headers.get("x-lanes-truncated") !== "true") return undefined;
  const after = headers.get("x-lanes-next-after");
  if (after || at.after !== undefined) return nextByKey(at, after);
  const next = Number(headers.get("x-lanes-next-offset"));
  if (!Number.isInteger(next)) throw new Error(`a truncated listing page with X-Lanes-Next-Offset ${String(headers.get("x-lanes-next-offset"))}`);
  return nextByOffset(at, next);
}

/*
 * The dead-letter, message and queue listings are too long to hold whole, so they have no
 * whole-listing call; the `all…` walks go through them a page at a time instead, holding one page.
 * Each page after the first starts after the broker's key (nextAfter), which rows replayed, pushed,
 * consumed or deleted between two pages do not move, as they move an offset. A broker that names
 * no key (one before keyed paging) is followed by offset, as the whole-listing calls follow it: the
 * dead letters and messages while a page says it is truncated (nextOffset), or, from a broker
 * before that flag, while a page is full; the queues while the rows so far are fewer than the
 * page's total. An offset skips or repeats rows that come or go meanwhile, which such a broker
 * leaves no way around; stopping after one page would instead lose the rest.
 */

/** walkPage is the page size the walks ask for unless told: the broker's own default page, small enough that a page of message payloads stays a few MB. */
export const walkPage = 100;

/** A page's rows and where the next starts (undefined after the last). */
type WalkPage<T> = { rows: T[]; next: PagePlace | undefined };

/** WalkOptions: aborting `signal` ends a walk, as it ends the SDK's other calls, by throwing its reason once: a page in flight is aborted, and no page is asked for after it. */
export type WalkOptions = RequestOptions;

/** walkPages yields the rows of page after page from `start`; leaving the loop early asks for no further page, and a page's error (or `signal`'s reason, once it aborts, before the next page) is thrown once, ending the walk. */
async function* walkPages<T>(start: PagePlace, signal: AbortSignal | undefined, fetchPage: (at: PagePlace) => Promise<WalkPage<T>>): AsyncGenerator<T, void, undefined> {
  for (let at: PagePlace | undefined = start; at !== undefined; ) {
    if (signal?.aborted) throw signal.reason;
    const page = await fetchPage(at);
    yield* page.rows;
    at = page.next;
  }
}

/** truncatedNext is where the page after a dead-letter or message page starts: bodyNext's rule when the page says whether it was cut, else (a broker before `truncated`, which pages at `limit` only) the offset after its rows while it is full. */
function truncatedNext(page: BodyPaging, at: PagePlace, rows: number, limit: number): PagePlace | undefined {
  if (page.truncated !== undefined) return bodyNext(page, at);
  if (at.after !== undefined || rows < limit) return undefined;
  return nextByOffset(at, (at.offset ?? 0) + rows);
}

/** queuesNext is where the page after a queue-list page starts: after its nextAfter, sent while more queues follow; without one (an older broker) the offset after its rows while fewer than `total` came. */
function queuesNext(nextAfter: string | null | undefined, at: PagePlace, rows: number, total: number | undefined): PagePlace | undefined {
  if (nextAfter) return nextByKey(at, nextAfter);
  const offset = at.offset ?? 0;
  if (at.after !== undefined || rows === 0 || total === undefined || offset + rows >= total) return undefined;
  return nextByOffset(at, offset + rows);
}

/** The paging part of a walk's query: where it starts (`after` or `offset`) and its page size (`limit`, default walkPage). */
type WalkQuery = { limit?: number | undefined; offset?: number | undefined; after?: string | undefined };

/** walkStart splits a walk's query into its filters, its page size and where it starts. */
function walkStart<Q extends WalkQuery>(query: Q): { filters: Omit<Q, keyof WalkQuery>; limit: number; start: PagePlace } {
  const { limit, offset, after, ...filters } = query;
  return { filters, limit: limit || walkPage, start: { offset: offset || undefined, after: after || undefined } };
}

/** Admin is `lanes.admin`: management routes (queues, seek, groups, DLQ, messages, status, maintenance). Every method takes `{ signal }` last (RequestOptions): after the query on the listings, as on the walks. */
export class Admin {
  /** @internal */
  constructor(private readonly core: Core) {}

  private async get<T>(path: string, query?: Query, signal?: AbortSignal): Promise<T> {
    return (await this.core.transport.request<T>({ method: "GET", path, query: qs(query), signal })).body;
  }
  /** headerPages hands every page of a listing answered as a bare array or keyed by queue to `add`, following its paging headers. */
  private async headerPages<T>(path: string, query: Query, add: (body: T) => void, signal: AbortSignal | undefined): Promise<void> {
    let at: PagePlace | undefined = {};
    while (at !== undefined) {
      const res = await this.core.transport.request<T>({ method: "GET", path, query: qs({ ...query, limit: wholeListingPage, ...at }), signal });
      add(res.body);
      at = headerNext(res.headers, at);
    }
  }
  /** partitionPages is a whole object listing whose `key` array is paged (truncated, nextAfter, nextOffset), merged into the first page. */
  private partitionPages<T extends BodyPaging>(path: string, query: Query, key: keyof T, signal: AbortSignal | undefined): Promise<T> {
    return bodyPages((at) => this.get<T>(path, { ...query, limit: wholeListingPage, ...at }, signal), key);
  }
  private async post<T>(path: string, body: unknown, signal: AbortSignal | undefined): Promise<T> {
    return (await this.core.transport.request<T>({ method: "POST", path, body, signal })).body;
  }
  private async del<T>(path: string, query: Query | undefined, signal: AbortSignal | undefined): Promise<T> {
    return (await this.core.transport.request<T>({ method: "DELETE", path, query: qs(query), signal })).body;
  }

  // ---- queues

  /** configureQueue creates or configures a queue: `replace` (default) resets omitted options, `merge` keeps them. */
  configureQueue(queue: string, options: QueueOptions, opts: { mode?: "merge" | "replace" | undefined; namespace?: string | undefined; task?: string | undefined } & RequestOptions = {}): Promise<ConfigureResult> {
    const { signal, ...fields } = opts;
    return this.post("/api/v1/configure", { queue, options, ...fields }, signal);
  }
  /** listQueues lists one page of queues by name; page with `after` (the page's `nextAfter`), which queues created or deleted between two pages do not shift, as they shift an `offset`. */
  listQueues(query: { namespace?: string | undefined; task?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}, opts: RequestOptions = {}): Promise<QueueList> {
    return this.get("/api/v1/resources/queues", query, opts.signal);
  }
  /**
   * allQueues walks every queue the filters select, by name, page by page (`limit` rows a page,
   * default 100): `for await (const q of lanes.admin.allQueues({ namespace: "billing" })) …`.
   * Queues created or deleted meanwhile move no queue of the rest; leaving the loop asks for no
   * further page; a page's error is thrown once and ends the walk, and so is `opts.signal`'s
   * reason when it aborts (a page in flight is aborted; no further page is asked for).
   */
  allQueues(query: { namespace?: string | undefined; task?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}, opts: WalkOptions = {}): AsyncGenerator<QueueSummary, void, undefined> {
    const { filters, limit, start } = walkStart(query);
    return walkPages(start, opts.signal, async (at) => {
      const page = await this.get<QueueList>("/api/v1/resources/queues", { ...filters, limit, ...at }, opts.signal);
      return { rows: page.queues, next: queuesNext(page.nextAfter, at, page.queues.length, page.total) };
    });
  }
  /** getQueue returns one queue with its options and every partition (following the broker's pages). */
  getQueue(queue: string, opts: RequestOptions = {}): Promise<QueueDetail> {
    return this.partitionPages<QueueDetail>(`/api/v1/resources/queues/${e(queue)}`, {}, "partitions", opts.signal);
  }
  /** deleteQueue deletes a queue and everything in it (200 even when nothing was deleted). */
  deleteQueue(queue: string, opts: RequestOptions = {}): Promise<DeleteQueueResult> {
    return this.del(`/api/v1/resources/queues/${e(queue)}`, undefined, opts.signal);
  }
  /** getQueueDepth is the pending count of a queue for a group (queue mode when none), with every partition. */
  async getQueueDepth(queue: string, group?: string, opts: RequestOptions = {}): Promise<QueueDepth> {
    checkGroup("getQueueDepth", group);
    return this.partitionPages<QueueDepth>(`/api/v1/resources/queues/${e(queue)}/depth`, { group }, "partitions", opts.signal);
  }
  /** getOverview returns system-wide counters. */
  getOverview(opts: RequestOptions = {}): Promise<Overview> {
    return this.get("/api/v1/resources/overview", undefined, opts.signal);
  }
  /** getNamespaces lists every namespace (following the broker's pages). */
  getNamespaces(opts: RequestOptions = {}): Promise<NamespaceList> {
    return this.partitionPages<NamespaceList>("/api/v1/resources/namespaces", {}, "namespaces", opts.signal);
  }
  /** getTasks lists every task (following the broker's pages). */
  getTasks(opts: RequestOptions = {}): Promise<TaskList> {
    return this.partitionPages<TaskList>("/api/v1/resources/tasks", {}, "tasks", opts.signal);
  }

  // ---- consumer groups

  /** seekConsumerGroup moves one group's cursor on every partition of a queue (releasing live leases, resetting the retry budget). */
  async seekConsumerGroup(group: string, queue: string, to: SeekTarget, opts: RequestOptions = {}): Promise<SeekQueueResult> {
    checkGroup("seekConsumerGroup", group, true);
    return this.post(`/api/v1/consumer-groups/${e(group)}/queues/${e(queue)}/seek`, seekBody(to), opts.signal);
  }
  /** seekConsumerGroupPartition moves one group's cursor on one partition. */
  async seekConsumerGroupPartition(group: string, queue: string, partition: string, to: SeekTarget, opts: RequestOptions = {}): Promise<SeekPartitionResult> {
    checkGroup("seekConsumerGroupPartition", group, true);
    return this.post(`/api/v1/consumer-groups/${e(group)}/queues/${e(queue)}/partitions/${e(partition)}/seek`, seekBody(to), opts.signal);
  }
  /** listConsumerGroups lists every (group, queue) row with lag (following the broker's pages). */
  async listConsumerGroups(opts: RequestOptions = {}): Promise<ConsumerGroupSummary[]> {
    const out: ConsumerGroupSummary[] = [];
    await this.headerPages<ConsumerGroupSummary[]>("/api/v1/consumer-groups", {}, (rows) => out.push(...rows), opts.signal);
    return out;
  }
  /** getConsumerGroup returns a group's cursors keyed by queue (following the broker's pages). */
  async getConsumerGroup(group: string, opts: RequestOptions = {}): Promise<ConsumerGroupDetail> {
    checkGroup("getConsumerGroup", group, true);
    const out: ConsumerGroupDetail = {};
    await this.headerPages<ConsumerGroupDetail>(`/api/v1/consumer-groups/${e(group)}`, {}, (page) => {
      for (const [queue, detail] of Object.entries(page)) {
        const seen = out[queue]; // a queue's partitions may span two pages
        out[queue] = seen === undefined ? detail : { ...detail, partitions: [...seen.partitions, ...detail.partitions] };
      }
    }, opts.signal);
    return out;
  }
  /** laggingConsumerGroups lists every partition whose oldest unconsumed message is older than `minLagSeconds` (default 60). */
  async laggingConsumerGroups(minLagSeconds = 60, opts: RequestOptions = {}): Promise<LaggingConsumerGroup[]> {
    const out: LaggingConsumerGroup[] = [];
    await this.headerPages<LaggingConsumerGroup[]>("/api/v1/consumer-groups/lagging", { minLagSeconds }, (rows) => out.push(...rows), opts.signal);
    return out;
  }
  /** deleteConsumerGroup deletes a group's cursors on every queue (the next pop re-seeds it). */
  async deleteConsumerGroup(group: string, deleteMetadata = true, opts: RequestOptions = {}): Promise<ConsumerGroupDeleteResult> {
    checkGroup("deleteConsumerGroup", group, true);
    return this.del(`/api/v1/consumer-groups/${e(group)}`, { deleteMetadata }, opts.signal);
  }
  /** deleteConsumerGroupForQueue deletes a group's cursors on one queue. */
  async deleteConsumerGroupForQueue(group: string, queue: string, deleteMetadata = true, opts: RequestOptions = {}): Promise<ConsumerGroupDeleteResult> {
    checkGroup("deleteConsumerGroupForQueue", group, true);
    return this.del(`/api/v1/consumer-groups/${e(group)}/queues/${e(queue)}`, { deleteMetadata }, opts.signal);
  }
  /** updateSubscription changes where a group's untouched partitions get seeded (existing cursors do not move). */
  async updateSubscription(group: string, timestamp: string | Date, opts: RequestOptions = {}): Promise<SubscriptionUpdateResult> {
    checkGroup("updateSubscription", group, true);
    return this.post(`/api/v1/consumer-groups/${e(group)}/subscription`, { subscriptionTimestamp: timestamp instanceof Date ? timestamp.toISOString() : timestamp }, opts.signal);
  }

  // ---- DLQ and messages

  /** listDlq lists dead letters (newest failure first); page by `after: page.nextAfter`, which dead letters replayed or filed between two pages do not move. */
  listDlq(query: { queue?: string | undefined; consumerGroup?: string | undefined; partition?: string | undefined; from?: string | undefined; to?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}, opts: RequestOptions = {}): Promise<DlqList> {
    return listDlq(this.core, query, opts.signal);
  }
  /**
   * allDlq walks every dead letter the filters select, newest failure first, page by page
   * (`limit` rows a page, default 100), as allQueues: dead letters replayed, deleted or filed
   * meanwhile move no row of the rest.
   */
  allDlq(query: { queue?: string | undefined; consumerGroup?: string | undefined; partition?: string | undefined; from?: string | undefined; to?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}, opts: WalkOptions = {}): AsyncGenerator<DlqMessage, void, undefined> {
    checkGroup("allDlq", query.consumerGroup);
    const { filters, limit, start } = walkStart(query);
    return walkPages(start, opts.signal, async (at) => {
      const page = await listDlq(this.core, { ...filters, limit, ...at }, opts.signal);
      return { rows: page.messages, next: truncatedNext(page, at, page.messages.length, limit) };
    });
  }
  /** purgeDlq deletes a queue's dead letters (optionally one group's). */
  async purgeDlq(queue: string, consumerGroup?: string, opts: RequestOptions = {}): Promise<DlqPurgeResult> {
    checkGroup("purgeDlq", consumerGroup);
    return this.del("/api/v1/dlq", { queue, consumerGroup }, opts.signal);
  }
  /** replayDlq moves one dead letter back into a queue (its original place unless `dest` says otherwise) under the id `dlq:<id>`. */
  replayDlq(id: string, dest: DlqReplayRequest = {}, opts: RequestOptions = {}): Promise<DlqReplayResult> {
    return this.post(`/api/v1/dlq/${e(id)}/replay`, dest, opts.signal);
  }
  /** listMessages lists messages with their derived status; page by `after: page.nextAfter`, which messages pushed or consumed between two pages do not move. */
  listMessages(query: MessageListQuery = {}, opts: RequestOptions = {}): Promise<MessageList> {
    return this.get("/api/v1/messages", query as Query, opts.signal);
  }
  /**
   * allMessages walks every message the filters select, newest first, page by page as allDlq; a
   * page the broker's answer byte budget cut short is continued after its last message, and
   * messages pushed meanwhile sort before the walk's place and are not listed.
   */
  allMessages(query: MessageListQuery = {}, opts: WalkOptions = {}): AsyncGenerator<MessageListItem, void, undefined> {
    const { filters, limit, start } = walkStart(query);
    return walkPages(start, opts.signal, async (at) => {
      const page = await this.get<MessageList>("/api/v1/messages", { ...filters, limit, ...at } as Query, opts.signal);
      return { rows: page.messages, next: truncatedNext(page, at, page.messages.length, limit) };
    });
  }
  /** getMessage returns one message with its per-group state. */
  getMessage(partitionId: string, transactionId: string, opts: RequestOptions = {}): Promise<MessageDetail> {
    return this.get(`/api/v1/messages/${e(partitionId)}/${e(transactionId)}`, undefined, opts.signal);
  }
  /** deleteMessage deletes a dead-lettered message's DLQ rows. */
  deleteMessage(partitionId: string, transactionId: string, opts: RequestOptions = {}): Promise<DeleteMessageResult> {
    return this.del(`/api/v1/messages/${e(partitionId)}/${e(transactionId)}`, undefined, opts.signal);
  }
  /** retryMessage replays a dead-lettered message by its address. */
  retryMessage(partitionId: string, transactionId: string, opts: RequestOptions = {}): Promise<DlqReplayResult> {
    return this.post(`/api/v1/messages/${e(partitionId)}/${e(transactionId)}/retry`, {}, opts.signal);
  }

  // ---- status and system

  /** health is GET /health. */
  health(opts: RequestOptions = {}): Promise<Health> {
    return this.get("/health", undefined, opts.signal);
  }
  /** getMetrics is GET /metrics. */
  getMetrics(opts: RequestOptions = {}): Promise<Metrics> {
    return this.get("/metrics", undefined, opts.signal);
  }
  /** getStatus is the dashboard aggregate. */
  getStatus(query: { from?: string | undefined; to?: string | undefined; queue?: string | undefined; namespace?: string | undefined; task?: string | undefined } = {}, opts: RequestOptions = {}): Promise<StatusOverview> {
    return this.get("/api/v1/status", query, opts.signal);
  }
  /** listQueueStatus lists one page of queues with message counters, paged as listQueues. */
  listQueueStatus(query: { queue?: string | undefined; namespace?: string | undefined; task?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}, opts: RequestOptions = {}): Promise<QueueStatusList> {
    return this.get("/api/v1/status/queues", query, opts.signal);
  }
  /** allQueueStatus walks every queue the filters select with its message counters, by name, page by page as allQueues. */
  allQueueStatus(query: { queue?: string | undefined; namespace?: string | undefined; task?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}, opts: WalkOptions = {}): AsyncGenerator<QueueSummary, void, undefined> {
    const { filters, limit, start } = walkStart(query);
    return walkPages(start, opts.signal, async (at) => {
      const page = await this.get<QueueStatusList>("/api/v1/status/queues", { ...filters, limit, ...at }, opts.signal);
      return { rows: page.queues, next: queuesNext(page.nextAfter, at, page.queues.length, page.pagination.total) };
    });
  }
  /** getQueueStatus is the live detail of one queue, with every partition on request. */
  getQueueStatus(queue: string, includePartitions = false, opts: RequestOptions = {}): Promise<QueueStatus> {
    return this.partitionPages<QueueStatus>(`/api/v1/status/queues/${e(queue)}`, { includePartitions }, "partitions", opts.signal);
  }
  /** getBufferStatus is the broker's disk-spool state. */
  getBufferStatus(opts: RequestOptions = {}): Promise<BufferStatus> {
    return this.get("/api/v1/status/buffers", undefined, opts.signal);
  }
  /** getMaintenanceMode reads push maintenance. */
  getMaintenanceMode(opts: RequestOptions = {}): Promise<Maintenance> {
    return this.get("/api/v1/system/maintenance", undefined, opts.signal);
  }
  /** setMaintenanceMode diverts every push to the disk spool while on. */
  setMaintenanceMode(enabled: boolean, opts: RequestOptions = {}): Promise<Maintenance> {
    return this.post("/api/v1/system/maintenance", { enabled }, opts.signal);
  }
  /** getPopMaintenanceMode reads pop maintenance. */
  getPopMaintenanceMode(opts: RequestOptions = {}): Promise<Maintenance> {
    return this.get("/api/v1/system/maintenance/pop", undefined, opts.signal);
  }
  /** setPopMaintenanceMode makes every pop answer empty while on. */
  setPopMaintenanceMode(enabled: boolean, opts: RequestOptions = {}): Promise<Maintenance> {
    return this.post("/api/v1/system/maintenance/pop", { enabled }, opts.signal);
  }
}

function seekBody(to: SeekTarget): { toEnd: true } | { timestamp: string } {
  if ("toEnd" in to) return { toEnd: true };
  return { timestamp: to.timestamp instanceof Date ? to.timestamp.toISOString() : to.timestamp };
}

