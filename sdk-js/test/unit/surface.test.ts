// The names docs/sdk-design.md's tables give the TS SDK. Each list is typed `keyof` its class, so a
// name removed or renamed fails `npm run typecheck`; the tests check the runtime objects carry them
// too. A row added to a table gets its names added here (sdk-go/surface_test.go and
// sdk-python/tests/test_surface.py hold the same rows for Go and Python).
import { describe, expect, it } from "vitest";
import * as lanes from "../../src/index.js";
import type { Admin, Consumer, DlqBuilder, Kv, Lanes, LanesOptions, QueueBuilder, Timers, TransactionBuilder, TransactionKv, TransactionQueue } from "../../src/index.js";

// §1 client options and methods.
const clientOptions: (keyof LanesOptions)[] = [
  "url", "urls", "bearerToken", "timeoutMillis", "retryAttempts", "retryDelayMillis", "maxRetryDelayMillis",
  "max429Attempts", "maxRetryAfterMillis", "healthRetryAfterMillis", "logger", "fetch", "headers", "popAutopilot",
];
const client: (keyof Lanes)[] = ["queue", "transaction", "kv", "kvNamespaces", "timers", "health", "ack", "renew", "flushAll", "bufferStats", "close", "admin"];
// §2 producing, §3 consuming and §6's builders on a queue.
const queue: (keyof QueueBuilder)[] = [
  "partition", "push", "buffer",
  "namespace", "task", "group", "subscriptionMode", "subscriptionFrom", "batch", "partitions", "autopilot", "wait",
  "timeoutMillis", "leaseSeconds", "serverAutoAck", "concurrency", "limit", "idleMillis", "renewLease", "each",
  "autoAck", "onError", "softStopTimeoutMillis", "reportHandlerErrors", "pop", "popResult", "consume",
  "consumeBatch", "messages",
  "config", "create", "delete", "depth", "dlq",
];
const dlq: (keyof DlqBuilder)[] = ["partition", "limit", "offset", "after", "from", "to", "get", "all"];
const consumer: (keyof Consumer)[] = ["stop", "stopAndCancel", "closed", "done", "error", "then"];
// §5 transactions.
const transaction: (keyof TransactionBuilder)[] = ["queue", "ack", "kv", "timer", "cancelTimer", "commit"];
const transactionQueue: (keyof TransactionQueue)[] = ["partition", "push"];
const transactionKv: (keyof TransactionKv)[] = ["put", "putIfAbsent", "once", "delete", "incr", "get"];
// §6 admin, KV and timers.
const admin: (keyof Admin)[] = [
  "configureQueue", "getQueue", "listQueues", "deleteQueue", "getQueueDepth", "seekConsumerGroup",
  "seekConsumerGroupPartition", "listConsumerGroups", "getConsumerGroup", "laggingConsumerGroups",
  "deleteConsumerGroup", "deleteConsumerGroupForQueue", "updateSubscription", "listDlq", "purgeDlq", "replayDlq",
  "listMessages", "getMessage", "deleteMessage", "retryMessage", "getOverview", "getNamespaces", "getTasks",
  "getStatus", "listQueueStatus", "getQueueStatus", "getBufferStatus", "getMetrics", "getMaintenanceMode",
  "setMaintenanceMode", "getPopMaintenanceMode", "setPopMaintenanceMode",
  "allQueues", "allQueueStatus", "allDlq", "allMessages",
];
const kv: (keyof Kv)[] = ["get", "put", "putIfAbsent", "getMany", "getPrefix", "incr", "delete", "batch", "list"];
const timers: (keyof Timers)[] = ["schedule", "reschedule", "cancel", "get", "list", "batch"];
// §7 errors: the per-status kinds are APIErrors, the rest LanesErrors.
const statusKinds = [
  "BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError", "ConflictError",
  "PayloadTooLargeError", "RateLimitError", "InternalServerError", "NotImplementedByBrokerError",
] as const satisfies readonly (keyof typeof lanes)[];
const otherErrors = [
  "APIError", "APIConnectionError", "APITimeoutError", "OutcomeUnknownError", "UnexpectedAnswerError", "PushError",
  "AckError", "TransactionError", "InvalidItemError", "InvalidValueError", "InvalidNameError", "ClientClosedError",
  "UnsentError", "EmptyTransactionError", "ConsumerStoppedError", "AutoAckDroppedError", "HandlerError",
] as const satisfies readonly (keyof typeof lanes)[];
const helpers = ["timerOp", "withDeadline"] as const satisfies readonly (keyof typeof lanes)[];

function has(obj: object, names: readonly PropertyKey[]) {
  for (const n of names) expect(n in obj, String(n)).toBe(true);
}

describe("docs/sdk-design.md tables", () => {
  const c = new lanes.Lanes({ url: "http://127.0.0.1:2", logger: null });

  it("client options and methods", () => {
    expect(clientOptions.length).toBeGreaterThan(0);
    has(c, client);
  });

  it("builders: queue, dlq, transaction, kv, timers, admin", () => {
    const q = c.queue("q");
    has(q, queue);
    has(q.dlq("g"), dlq);
    const tx = c.transaction();
    has(tx, transaction);
    has(tx.queue("q"), transactionQueue);
    has(tx.kv, transactionKv);
    has(c.admin, admin);
    has(c.kv("ns"), kv);
    has(c.timers("q"), timers);
    has(lanes.Consumer.prototype, consumer.filter((n) => n !== "closed" && n !== "done" && n !== "error"));
  });

  it("error kinds", () => {
    for (const n of statusKinds) expect(lanes[n].prototype, n).toBeInstanceOf(lanes.APIError);
    for (const n of otherErrors) expect(lanes[n].prototype, n).toBeInstanceOf(lanes.LanesError);
    expect(lanes.APITimeoutError.prototype).toBeInstanceOf(lanes.APIConnectionError);
    for (const n of helpers) expect(typeof lanes[n]).toBe("function");
  });
});
