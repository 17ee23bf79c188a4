// Admin: queues, consumer groups (seek, delete, subscription), DLQ, messages, status. Every
// method returns the generated response type of its route.
import type { Core } from "./internal/core.js";
import { checkGroup } from "./names.js";
import { listDlq } from "./queue.js";
import type {
  BufferStatus,
  ConfigureResult,
  ConsumerGroupDeleteResult,
  ConsumerGroupDetail,
  ConsumerGroupSummary,
  DeleteMessageResult,
  DeleteQueueResult,
  DlqList,
  DlqPurgeResult,
  DlqReplayRequest,
  DlqReplayResult,
  Health,
  LaggingConsumerGroup,
  Maintenance,
  MessageDetail,
  MessageList,
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

/** Admin is `lanes.admin`: management routes (queues, seek, groups, DLQ, messages, status, maintenance). */
export class Admin {
  /** @internal */
  constructor(private readonly core: Core) {}

  private async get<T>(path: string, query?: Query): Promise<T> {
    return (await this.core.transport.request<T>({ method: "GET", path, query: qs(query) })).body;
  }
  /** headerPages hands every page of a listing answered as a bare array or keyed by queue to `add`, following its paging headers. */
  private async headerPages<T>(path: string, query: Query, add: (body: T) => void): Promise<void> {
    let at: PagePlace | undefined = {};
    while (at !== undefined) {
      const res = await this.core.transport.request<T>({ method: "GET", path, query: qs({ ...query, limit: wholeListingPage, ...at }) });
      add(res.body);
      at = headerNext(res.headers, at);
    }
  }
  /** partitionPages is a whole object listing whose `key` array is paged (truncated, nextAfter, nextOffset), merged into the first page. */
  private partitionPages<T extends BodyPaging>(path: string, query: Query, key: keyof T): Promise<T> {
    return bodyPages((at) => this.get<T>(path, { ...query, limit: wholeListingPage, ...at }), key);
  }
  private async post<T>(path: string, body: unknown, query?: Query): Promise<T> {
    return (await this.core.transport.request<T>({ method: "POST", path, body, query: qs(query) })).body;
  }
  private async del<T>(path: string, query?: Query): Promise<T> {
    return (await this.core.transport.request<T>({ method: "DELETE", path, query: qs(query) })).body;
  }

  // ---- queues

  /** configureQueue creates or configures a queue: `replace` (default) resets omitted options, `merge` keeps them. */
  configureQueue(queue: string, options: QueueOptions, opts: { mode?: "merge" | "replace" | undefined; namespace?: string | undefined; task?: string | undefined } = {}): Promise<ConfigureResult> {
    return this.post("/api/v1/configure", { queue, options, ...opts });
  }
  /** listQueues lists one page of queues by name; page with `after` (the page's `nextAfter`), which queues created or deleted between two pages do not shift, as they shift an `offset`. */
  listQueues(query: { namespace?: string | undefined; task?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}): Promise<QueueList> {
    return this.get("/api/v1/resources/queues", query);
  }
  /** getQueue returns one queue with its options and every partition (following the broker's pages). */
  getQueue(queue: string): Promise<QueueDetail> {
    return this.partitionPages<QueueDetail>(`/api/v1/resources/queues/${e(queue)}`, {}, "partitions");
  }
  /** deleteQueue deletes a queue and everything in it (200 even when nothing was deleted). */
  deleteQueue(queue: string): Promise<DeleteQueueResult> {
    return this.del(`/api/v1/resources/queues/${e(queue)}`);
  }
  /** getQueueDepth is the pending count of a queue for a group (queue mode when none), with every partition. */
  async getQueueDepth(queue: string, group?: string): Promise<QueueDepth> {
    checkGroup("getQueueDepth", group);
    return this.partitionPages<QueueDepth>(`/api/v1/resources/queues/${e(queue)}/depth`, { group }, "partitions");
  }
  /** getOverview returns system-wide counters. */
  getOverview(): Promise<Overview> {
    return this.get("/api/v1/resources/overview");
  }
  /** getNamespaces lists every namespace (following the broker's pages). */
  getNamespaces(): Promise<NamespaceList> {
    return this.partitionPages<NamespaceList>("/api/v1/resources/namespaces", {}, "namespaces");
  }
  /** getTasks lists every task (following the broker's pages). */
  getTasks(): Promise<TaskList> {
    return this.partitionPages<TaskList>("/api/v1/resources/tasks", {}, "tasks");
  }

  // ---- consumer groups

  /** seekConsumerGroup moves one group's cursor on every partition of a queue (releasing live leases, resetting the retry budget). */
  async seekConsumerGroup(group: string, queue: string, to: SeekTarget): Promise<SeekQueueResult> {
    checkGroup("seekConsumerGroup", group, true);
    return this.post(`/api/v1/consumer-groups/${e(group)}/queues/${e(queue)}/seek`, seekBody(to));
  }
  /** seekConsumerGroupPartition moves one group's cursor on one partition. */
  async seekConsumerGroupPartition(group: string, queue: string, partition: string, to: SeekTarget): Promise<SeekPartitionResult> {
    checkGroup("seekConsumerGroupPartition", group, true);
    return this.post(`/api/v1/consumer-groups/${e(group)}/queues/${e(queue)}/partitions/${e(partition)}/seek`, seekBody(to));
  }
  /** listConsumerGroups lists every (group, queue) row with lag (following the broker's pages). */
  async listConsumerGroups(): Promise<ConsumerGroupSummary[]> {
    const out: ConsumerGroupSummary[] = [];
    await this.headerPages<ConsumerGroupSummary[]>("/api/v1/consumer-groups", {}, (rows) => out.push(...rows));
    return out;
  }
  /** getConsumerGroup returns a group's cursors keyed by queue (following the broker's pages). */
  async getConsumerGroup(group: string): Promise<ConsumerGroupDetail> {
    checkGroup("getConsumerGroup", group, true);
    const out: ConsumerGroupDetail = {};
    await this.headerPages<ConsumerGroupDetail>(`/api/v1/consumer-groups/${e(group)}`, {}, (page) => {
      for (const [queue, detail] of Object.entries(page)) {
        const seen = out[queue]; // a queue's partitions may span two pages
        out[queue] = seen === undefined ? detail : { ...detail, partitions: [...seen.partitions, ...detail.partitions] };
      }
    });
    return out;
  }
  /** laggingConsumerGroups lists every partition whose oldest unconsumed message is older than `minLagSeconds` (default 60). */
  async laggingConsumerGroups(minLagSeconds = 60): Promise<LaggingConsumerGroup[]> {
    const out: LaggingConsumerGroup[] = [];
    await this.headerPages<LaggingConsumerGroup[]>("/api/v1/consumer-groups/lagging", { minLagSeconds }, (rows) => out.push(...rows));
    return out;
  }
  /** deleteConsumerGroup deletes a group's cursors on every queue (the next pop re-seeds it). */
  async deleteConsumerGroup(group: string, deleteMetadata = true): Promise<ConsumerGroupDeleteResult> {
    checkGroup("deleteConsumerGroup", group, true);
    return this.del(`/api/v1/consumer-groups/${e(group)}`, { deleteMetadata });
  }
  /** deleteConsumerGroupForQueue deletes a group's cursors on one queue. */
  async deleteConsumerGroupForQueue(group: string, queue: string, deleteMetadata = true): Promise<ConsumerGroupDeleteResult> {
    checkGroup("deleteConsumerGroupForQueue", group, true);
    return this.del(`/api/v1/consumer-groups/${e(group)}/queues/${e(queue)}`, { deleteMetadata });
  }
  /** updateSubscription changes where a group's untouched partitions get seeded (existing cursors do not move). */
  async updateSubscription(group: string, timestamp: string | Date): Promise<SubscriptionUpdateResult> {
    checkGroup("updateSubscription", group, true);
    return this.post(`/api/v1/consumer-groups/${e(group)}/subscription`, { subscriptionTimestamp: timestamp instanceof Date ? timestamp.toISOString() : timestamp });
  }

  // ---- DLQ and messages

  /** listDlq lists dead letters (newest failure first); page by `after: page.nextAfter`, which dead letters replayed or filed between two pages do not move. */
  listDlq(query: { queue?: string | undefined; consumerGroup?: string | undefined; partition?: string | undefined; from?: string | undefined; to?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}): Promise<DlqList> {
    return listDlq(this.core, query);
  }
  /** purgeDlq deletes a queue's dead letters (optionally one group's). */
  async purgeDlq(queue: string, consumerGroup?: string): Promise<DlqPurgeResult> {
    checkGroup("purgeDlq", consumerGroup);
    return this.del("/api/v1/dlq", { queue, consumerGroup });
  }
  /** replayDlq moves one dead letter back into a queue (its original place unless `dest` says otherwise) under the id `dlq:<id>`. */
  replayDlq(id: string, dest: DlqReplayRequest = {}): Promise<DlqReplayResult> {
    return this.post(`/api/v1/dlq/${e(id)}/replay`, dest);
  }
  /** listMessages lists messages with their derived status; page by `after: page.nextAfter`, which messages pushed or consumed between two pages do not move. */
  listMessages(query: MessageListQuery = {}): Promise<MessageList> {
    return this.get("/api/v1/messages", query as Query);
  }
  /** getMessage returns one message with its per-group state. */
  getMessage(partitionId: string, transactionId: string): Promise<MessageDetail> {
    return this.get(`/api/v1/messages/${e(partitionId)}/${e(transactionId)}`);
  }
  /** deleteMessage deletes a dead-lettered message's DLQ rows. */
  deleteMessage(partitionId: string, transactionId: string): Promise<DeleteMessageResult> {
    return this.del(`/api/v1/messages/${e(partitionId)}/${e(transactionId)}`);
  }
  /** retryMessage replays a dead-lettered message by its address. */
  retryMessage(partitionId: string, transactionId: string): Promise<DlqReplayResult> {
    return this.post(`/api/v1/messages/${e(partitionId)}/${e(transactionId)}/retry`, {});
  }

  // ---- status and system

  /** health is GET /health. */
  health(): Promise<Health> {
    return this.get("/health");
  }
  /** getMetrics is GET /metrics. */
  getMetrics(): Promise<Metrics> {
    return this.get("/metrics");
  }
  /** getStatus is the dashboard aggregate. */
  getStatus(query: { from?: string | undefined; to?: string | undefined; queue?: string | undefined; namespace?: string | undefined; task?: string | undefined } = {}): Promise<StatusOverview> {
    return this.get("/api/v1/status", query);
  }
  /** listQueueStatus lists one page of queues with message counters, paged as listQueues. */
  listQueueStatus(query: { queue?: string | undefined; namespace?: string | undefined; task?: string | undefined; limit?: number | undefined; offset?: number | undefined; after?: string | undefined } = {}): Promise<QueueStatusList> {
    return this.get("/api/v1/status/queues", query);
  }
  /** getQueueStatus is the live detail of one queue, with every partition on request. */
  getQueueStatus(queue: string, includePartitions = false): Promise<QueueStatus> {
    return this.partitionPages<QueueStatus>(`/api/v1/status/queues/${e(queue)}`, { includePartitions }, "partitions");
  }
  /** getBufferStatus is the broker's disk-spool state. */
  getBufferStatus(): Promise<BufferStatus> {
    return this.get("/api/v1/status/buffers");
  }
  /** getMaintenanceMode reads push maintenance. */
  getMaintenanceMode(): Promise<Maintenance> {
    return this.get("/api/v1/system/maintenance");
  }
  /** setMaintenanceMode diverts every push to the disk spool while on. */
  setMaintenanceMode(enabled: boolean): Promise<Maintenance> {
    return this.post("/api/v1/system/maintenance", { enabled });
  }
  /** getPopMaintenanceMode reads pop maintenance. */
  getPopMaintenanceMode(): Promise<Maintenance> {
    return this.get("/api/v1/system/maintenance/pop");
  }
  /** setPopMaintenanceMode makes every pop answer empty while on. */
  setPopMaintenanceMode(enabled: boolean): Promise<Maintenance> {
    return this.post("/api/v1/system/maintenance/pop", { enabled });
  }
}

function seekBody(to: SeekTarget): { toEnd: true } | { timestamp: string } {
  if ("toEnd" in to) return { toEnd: true };
  return { timestamp: to.timestamp instanceof Date ? to.timestamp.toISOString() : to.timestamp };
}

