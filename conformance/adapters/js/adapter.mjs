// Conformance adapter for the TypeScript SDK: cases arrive as JSON Lines on stdin, each step
// runs through the public API of @lanesmq/lanes (never raw HTTP), one result line per case goes
// to stdout. Protocol: docs/conformance.md.
import { createInterface } from "node:readline";
import {
  Lanes,
  APIError,
  APIConnectionError,
  APITimeoutError,
  OutcomeUnknownError,
  UnsentError,
  PushError,
  AckError,
  TransactionError,
  LanesError,
  HandlerError,
  ClientClosedError,
  InvalidItemError,
  withDeadline,
  timerOp,
} from "@lanesmq/lanes";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// handlerFailure is the error a scripted handler failure throws: a plain Error, or the SDK's own error for want of a broker (connection: APIConnectionError; status: an APIError of that status).
function handlerFailure(f) {
  const text = "handler failure (scripted)";
  if (f.connection) return new APIConnectionError(text, { attempts: 1, url: "http://127.0.0.1:1" });
  if (f.status > 0) return new APIError({ status: f.status, code: "scripted", message: text, body: null });
  return new Error(text);
}

function errKind(err) {
  if (err instanceof HandlerError) return { kind: "handler", transactionIds: err.messages.map((m) => m.transactionId), message: err.message };
  if (err instanceof OutcomeUnknownError) {
    // The kind of the last attempt's failure; timeout as the error itself reports it.
    const out = errKind(err.cause);
    delete out.timeout;
    if (err instanceof APITimeoutError) out.timeout = true;
    return { ...out, outcomeUnknown: true, attempts: err.attempts, message: err.message };
  }
  if (err instanceof UnsentError) return { kind: "unsent", unsent: err.unsent, message: err.message };
  if (err instanceof ClientClosedError) return { kind: "client_closed", message: err.message };
  if (err instanceof InvalidItemError) return { kind: "invalid_item", index: err.index, message: err.message };
  if (err instanceof PushError) return { kind: "push", message: err.message };
  if (err instanceof AckError) return { kind: "ack", message: err.message };
  if (err instanceof TransactionError) {
    const out = { kind: "transaction", reason: err.reason ?? "", message: err.message };
    if (err.kvReason) out.kvReason = err.kvReason;
    if (err.failedIndex !== undefined) out.failedIndex = err.failedIndex;
    return out;
  }
  if (err instanceof APIError) {
    const kind = { 429: "rate_limited", 403: "forbidden", 413: "payload_too_large", 404: "not_found", 501: "not_implemented" }[err.status] ?? "api";
    const out = { kind, status: err.status, code: err.code, message: err.message, terminal: err.terminal, attempts: err.attempts };
    if (err.retryAfter !== undefined) out.retryAfterMs = Math.round(err.retryAfter);
    return out;
  }
  if (err instanceof APIConnectionError) {
    const out = { kind: "connection", message: err.message, attempts: err.attempts };
    if (err instanceof APITimeoutError) out.timeout = true;
    return out;
  }
  return { kind: "other", message: String(err?.stack ?? err) };
}

// sdkErr is an SDK error as a step result; anything else is an adapter bug, rethrown to be
// reported as adapterError (as in Go) rather than as an SDK error of kind other.
function sdkErr(err) {
  if (!(err instanceof LanesError)) throw err;
  return errKind(err);
}

// CALLER_TRANSPORT_HEADER is what the caller's fetch (client option callerTransport) adds to each
// request it carries: how many it has carried, that one included, so a case sees that every
// request and retry went through it.
const CALLER_TRANSPORT_HEADER = "x-lanes-caller-transport";

function stampingFetch() {
  let carried = 0;
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set(CALLER_TRANSPORT_HEADER, String(++carried));
    return fetch(input, { ...init, headers });
  };
}

// recordingLogger is the logger of a client built with captureLogs: it keeps each line's level
// and its message with its details as key=value, for the logs step.
function recordingLogger(records) {
  const at = (level) => (message, details) => {
    const parts = [message, ...Object.entries(details ?? {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)];
    records.push({ level, message: parts.join(" ") });
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

const LEVELS = ["debug", "info", "warn", "error"];

function newClient(c, logged) {
  const o = c.client ?? {};
  // urls replaces the case's url with several brokers in order (the runner put the case's url
  // in place of "${url}").
  const headers = { ...(c.headers ?? {}), ...(o.headers ?? {}) };
  // headersInOrder: one key each, in order (a name in two letter cases is two keys).
  for (const [name, value] of o.headersInOrder ?? []) headers[name] = value;
  const opts = o.urls?.length ? { urls: o.urls, headers } : { url: c.url, headers };
  if (o.callerTransport) opts.fetch = stampingFetch();
  if (logged) opts.logger = recordingLogger(logged);
  if (o.bearerToken !== undefined) opts.bearerToken = o.bearerToken;
  if (o.bearerTokenFunc !== undefined) {
    // The tokens are prefix1, prefix2, … one per call, so a case sees when the SDK asked for one.
    let calls = 0;
    opts.bearerToken = () => `${o.bearerTokenFunc}${++calls}`;
  }
  if (o.healthRetryAfterMs !== undefined) opts.healthRetryAfterMillis = o.healthRetryAfterMs;
  if (o.retryAttempts !== undefined) opts.retryAttempts = o.retryAttempts;
  if (o.retryDelayMs !== undefined) opts.retryDelayMillis = o.retryDelayMs;
  if (o.maxRetryDelayMs !== undefined) opts.maxRetryDelayMillis = o.maxRetryDelayMs;
  if (o.max429Attempts !== undefined) opts.max429Attempts = o.max429Attempts;
  if (o.maxRetryAfterMs !== undefined) opts.maxRetryAfterMillis = o.maxRetryAfterMs;
  if (o.timeoutMs !== undefined) opts.timeoutMillis = o.timeoutMs;
  if (o.popAutopilot !== undefined) opts.popAutopilot = o.popAutopilot;
  // Environment read by the constructor (LANES_SDK_POP_AUTOPILOT) is set around it only.
  const saved = {};
  for (const [k, v] of Object.entries(o.env ?? {})) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  try {
    return new Lanes(opts);
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function builder(client, a) {
  let q = client.queue(a.queue);
  if (a.namespace) q = q.namespace(a.namespace);
  if (a.task) q = q.task(a.task);
  if (a.partition !== undefined) q = q.partition(a.partition);
  if (a.group) q = q.group(a.group);
  if (a.subscriptionMode) q = q.subscriptionMode(a.subscriptionMode);
  if (a.subscriptionFrom) q = q.subscriptionFrom(a.subscriptionFrom);
  if (a.batch > 0) q = q.batch(a.batch);
  if (a.partitions > 0) q = q.partitions(a.partitions);
  if (a.autopilot !== undefined) q = q.autopilot(a.autopilot);
  if (a.wait !== undefined) q = q.wait(a.wait);
  if (a.timeoutMs !== undefined) q = q.timeoutMillis(a.timeoutMs);
  if (a.leaseSeconds > 0) q = q.leaseSeconds(a.leaseSeconds);
  if (a.serverAutoAck !== undefined) q = q.serverAutoAck(a.serverAutoAck);
  return q;
}

// loopSettings applies the settings the consume and iterate steps share.
function loopSettings(q, a) {
  if (a.limit > 0) q = q.limit(a.limit);
  if (a.idleMs > 0) q = q.idleMillis(a.idleMs);
  if (a.autoAck !== undefined) q = q.autoAck(a.autoAck);
  return q;
}

const items = (list) =>
  (list ?? []).map((it) => {
    // notJSON: data JSON has no form for, which a case cannot write.
    const out = { data: it.notJSON ? { amount: NaN } : it.data === undefined ? null : it.data };
    if (it.transactionId) out.transactionId = it.transactionId;
    if (it.traceId) out.traceId = it.traceId;
    return out;
  });

function popSummary(pr) {
  const leases = new Set(pr.messages.map((m) => m.leaseId).filter(Boolean));
  return {
    count: pr.messages.length,
    data: pr.messages.map((m) => m.data),
    partitions: pr.messages.map((m) => m.partition),
    transactionIds: pr.messages.map((m) => m.transactionId),
    messageIds: pr.messages.map((m) => m.id),
    traceIds: pr.messages.map((m) => m.traceId || null),
    leases: leases.size,
    autopilot: pr.autopilot ? { partitions: pr.autopilot.partitions, batch: pr.autopilot.batch } : null,
  };
}

class AdapterError extends Error {}

// expiry is the SDK's KvExpiry for a wire op (ttlSeconds, else forever).
const expiry = (o) => (o.ttlSeconds > 0 ? { ttlSeconds: o.ttlSeconds } : { forever: true });
// stepExpiry is the SDK's KvExpiry for a kvPut or kvIncr step: absent ttlSeconds is forever; a number, 0 and fractions included, is passed on as given, so a case pins the SDK's own ttl rule.
const stepExpiry = (a) => (a.ttlSeconds === undefined ? { forever: true } : { ttlSeconds: a.ttlSeconds });

// txKv adds one wire-shaped KV op to a transaction through the builder's kv methods.
function txKv(tb, o) {
  const opts = {};
  for (const k of ["expect", "required", "min", "max"]) if (o[k] !== undefined) opts[k] = o[k];
  switch (o.op) {
    case "put":
      return tb.kv.put(o.ns, o.key, o.value ?? null, expiry(o), opts);
    case "putIfAbsent":
      return tb.kv.putIfAbsent(o.ns, o.key, o.value ?? null, expiry(o), opts);
    case "delete":
      return tb.kv.delete(o.ns, o.key, opts);
    case "incr":
      return tb.kv.incr(o.ns, o.key, o.delta ?? 1, expiry(o), opts);
    default:
      throw new AdapterError(`transaction kv op ${o.op} is not mapped`);
  }
}

// timerSchedule sends a payload only when the step gives data (none fires {}, as in Go and Python).
const timerSchedule = (t) => ("data" in t ? { delayMillis: t.delayMs ?? 0, payload: t.data } : { delayMillis: t.delayMs ?? 0 });

// address is a message step's target: a saved message (messages + index), a message a message
// walk handed over (walk + index, in walk order), or raw ids.
function address(st, a) {
  if (a.walk) {
    const m = st.walked.get(a.walk)?.[a.index ?? 0];
    if (!m) throw new AdapterError(`no message ${a.walk}[${a.index ?? 0}] handed over by a message walk`);
    return [m.partitionId, m.transactionId];
  }
  if (!a.messages) return [a.partitionId, a.transactionId];
  const [m] = st.messages(a.messages, [a.index ?? 0]);
  return [m.partitionId, m.transactionId];
}

// groupNames keeps the names that start with prefix (other cases' groups share the broker), sorted.
const groupNames = (names, prefix) => [...new Set(names)].filter((n) => n.startsWith(prefix ?? "")).sort();

// stateSteps are the KV, timer, DLQ, message and consumer-group steps; each answers the SDK's
// result (already wire-shaped in this SDK) and throws SDK errors to the caller.
const stateSteps = {
  async kvGet(c, a) {
    return await c.kv(a.ns).get(a.key);
  },
  async kvPut(c, a) {
    // ifAbsent: putIfAbsent; expect: a conditional put (0 = the key must not exist).
    if (a.ifAbsent) return await c.kv(a.ns).putIfAbsent(a.key, a.value ?? null, stepExpiry(a));
    if (a.expect !== undefined) return await c.kv(a.ns).put(a.key, a.value ?? null, stepExpiry(a), { expect: a.expect });
    return await c.kv(a.ns).put(a.key, a.value ?? null, stepExpiry(a));
  },
  async kvDelete(c, a) {
    if (a.expect !== undefined) return await c.kv(a.ns).delete(a.key, { expect: a.expect });
    return await c.kv(a.ns).delete(a.key);
  },
  async kvIncr(c, a) {
    const opts = {};
    if (a.min !== undefined) opts.min = a.min;
    if (a.max !== undefined) opts.max = a.max;
    return await c.kv(a.ns).incr(a.key, a.delta ?? 1, stepExpiry(a), opts);
  },
  async kvBatch(c, a) {
    return { results: await c.kv(a.ops?.[0]?.ns ?? "").batch(a.ops ?? []) };
  },
  async timerSchedule(c, a) {
    return await c.timers(a.queue).schedule(a.key, { ...timerSchedule(a), ...pick(a, "partition", "transactionId") });
  },
  async timerReschedule(c, a) {
    return await c.timers(a.queue).reschedule(a.key, { ...timerSchedule(a), ...pick(a, "partition", "transactionId") });
  },
  async timerBatch(c, a) {
    // Each op through the SDK's timerOp builder, sent in one timers(q).batch call.
    const ops = (a.ops ?? []).map((o) =>
      o.op === "cancel" ? timerOp("cancel", o.queue, o.key) : timerOp(o.op, o.queue, o.key, { ...timerSchedule(o), ...pick(o, "partition", "transactionId") }),
    );
    return { results: await c.timers(a.ops?.[0]?.queue ?? "").batch(ops) };
  },
  async timerGet(c, a) {
    return await c.timers(a.queue).get(a.key);
  },
  async timerCancel(c, a) {
    return await c.timers(a.queue).cancel(a.key);
  },
  async timerList(c, a) {
    const opts = {};
    if (a.limit > 0) opts.limit = a.limit;
    if (a.after) opts.after = a.after;
    if (a.prefix) opts.prefix = a.prefix;
    return await c.timers(a.queue).list(opts);
  },
  async dlqReplay(c, a) {
    let id = a.id;
    if (a.dlq) {
      const d = this.dlq.get(a.dlq)?.[a.index ?? 0];
      if (!d) throw new AdapterError(`no saved dead letter ${a.dlq}[${a.index}]`);
      id = d.id;
    }
    const to = {};
    if (a.queue !== undefined) to.queue = a.queue;
    if (a.partition !== undefined) to.partition = a.partition;
    return await c.admin.replayDlq(id, to);
  },
  async dlqPurge(c, a) {
    return await c.admin.purgeDlq(a.queue, a.group || undefined);
  },
  async messageGet(c, a) {
    return await c.admin.getMessage(...address(this, a));
  },
  async messageDelete(c, a) {
    return await c.admin.deleteMessage(...address(this, a));
  },
  async messageRetry(c, a) {
    return await c.admin.retryMessage(...address(this, a));
  },
  async groups(c, a) {
    return { names: groupNames((await c.admin.listConsumerGroups()).map((g) => g.name), a.prefix) };
  },
  async groupDelete(c, a) {
    const meta = a.deleteMetadata ?? true;
    if (a.queue) return await c.admin.deleteConsumerGroupForQueue(a.group, a.queue, meta);
    return await c.admin.deleteConsumerGroup(a.group, meta);
  },
  async lagging(c, a) {
    return { names: groupNames((await c.admin.laggingConsumerGroups(a.minLagSeconds ?? 0)).map((g) => g.consumer_group), a.prefix) };
  },
  async queueGet(c, a) {
    return await c.admin.getQueue(a.queue);
  },
  async queueDelete(c, a) {
    return await c.admin.deleteQueue(a.queue);
  },
  async queuesAll(c, a) {
    return this.walk(c.admin.allQueues(pick(a, "namespace", "task", "limit")), a);
  },
  async queues(c, a) {
    const list = await c.admin.listQueues({ ...pick(a, "namespace", "task", "limit", "offset"), ...this.after(a) });
    if (a.save) this.pages.set(a.save, list.nextAfter);
    return list;
  },
  async depth(c, a) {
    return await c.admin.getQueueDepth(a.queue, a.group || undefined);
  },
  async overview(c) {
    return await c.admin.getOverview();
  },
  async namespaces(c, a) {
    const r = await c.admin.getNamespaces();
    return { ...r, namespaces: withPrefix(r.namespaces, "namespace", a.prefix) };
  },
  async tasks(c, a) {
    const r = await c.admin.getTasks();
    return { ...r, tasks: withPrefix(r.tasks, "task", a.prefix) };
  },
  async status(c, a) {
    return await c.admin.getStatus(pick(a, "queue", "namespace", "task"));
  },
  async queueStatusesAll(c, a) {
    return this.walk(c.admin.allQueueStatus(pick(a, "queue", "namespace", "task", "limit")), a);
  },
  async queueStatuses(c, a) {
    const list = await c.admin.listQueueStatus({ ...pick(a, "queue", "namespace", "task", "limit", "offset"), ...this.after(a) });
    if (a.save) this.pages.set(a.save, list.nextAfter);
    return list;
  },
  async queueStatus(c, a) {
    return await c.admin.getQueueStatus(a.queue, a.includePartitions ?? false);
  },
  async bufferStatus(c) {
    return await c.admin.getBufferStatus();
  },
  async metrics(c) {
    return await c.admin.getMetrics();
  },
  async health(c) {
    return await c.health();
  },
  async maintenance(c, a) {
    return await maintenanceCall(c, a.scope, "get");
  },
  async setMaintenance(c, a) {
    return await maintenanceCall(c, a.scope, "set", a.enabled);
  },
  async messagesAll(c, a) {
    // save also keeps the messages handed over, in walk order, for the message steps' walk address
    const kept = [];
    if (a.save) this.walked.set(a.save, kept);
    return this.walk(c.admin.allMessages(pick(a, "queue", "partition", "status", "limit")), a, (m) => kept.push(m));
  },
  async messages(c, a) {
    const list = await c.admin.listMessages({ ...pick(a, "queue", "partition", "status", "limit", "offset"), ...this.after(a) });
    if (a.save) this.pages.set(a.save, list.nextAfter);
    return list;
  },
  async group(c, a) {
    return await c.admin.getConsumerGroup(a.group);
  },
  async subscription(c, a) {
    const t = this.marks.get(a.mark);
    if (!t) throw new AdapterError(`no mark ${a.mark}`);
    return await c.admin.updateSubscription(a.group, t);
  },
  async kvList(c, a) {
    return await c.kv(a.ns).list(pick(a, "prefix", "after", "limit", "keysOnly", "includeExpired"));
  },
  async kvNamespaces(c, a) {
    const r = await c.kvNamespaces();
    return { ...r, namespaces: withPrefix(r.namespaces, "namespace", a.prefix) };
  },
};

// pick copies the named step arguments that are set (an unset knob keeps the SDK's default).
const pick = (a, ...keys) => Object.fromEntries(keys.filter((k) => a[k] !== undefined && a[k] !== "").map((k) => [k, a[k]]));

// withPrefix keeps the list entries whose field starts with prefix (other cases share the broker), sorted by it.
const withPrefix = (list, field, prefix) =>
  (list ?? []).filter((r) => String(r[field] ?? "").startsWith(prefix ?? "")).sort((x, y) => (x[field] < y[field] ? -1 : x[field] > y[field] ? 1 : 0));

// peekAfterError bounds how far a walk is read past its error: anything there already fails the
// step, and a walk that never ends must not hang the case.
const peekAfterError = 5;

/** openWalk pulls rows from a walk one at a time (kept sees each one handed over), so a step can pause it between two pages (the SDK asks for a page only when the rows before are used up) and a walkResume step take the rest. */
function openWalk(rows, kept) {
  const it = rows[Symbol.asyncIterator]();
  let ended = false;
  // take hands over up to n more rows (0 = the rest) as a walk step's result, with the error the walk ended on and afterError, what it yielded after that error.
  const take = async (n) => {
    const got = [];
    const out = {};
    while (!ended && (!n || got.length < n)) {
      let next;
      try {
        next = await it.next();
      } catch (err) {
        ended = true;
        out.error = sdkErr(err);
        const after = await yieldedAfterError(it);
        if (after.length > 0) out.afterError = after;
        break;
      }
      if (next.done) ended = true;
      else {
        got.push(next.value);
        kept(next.value);
      }
    }
    return { ...out, count: got.length, rows: got };
  };
  return { take, stop: async () => void (await it.return?.()) };
}

/** yieldedAfterError is what a walk yields after its error, which ends it: nothing, unless the walk is broken. */
async function yieldedAfterError(it) {
  const out = [];
  for (let i = 0; i < peekAfterError; i++) {
    try {
      const next = await it.next();
      if (next.done) break;
      out.push({ row: next.value });
    } catch (err) {
      out.push({ error: sdkErr(err) });
    }
  }
  return out;
}

// maintenanceCall reads ("get") or sets the push or pop maintenance switch.
async function maintenanceCall(c, scope, how, enabled) {
  const calls = {
    push: { get: () => c.admin.getMaintenanceMode(), set: () => c.admin.setMaintenanceMode(enabled) },
    pop: { get: () => c.admin.getPopMaintenanceMode(), set: () => c.admin.setPopMaintenanceMode(enabled) },
  };
  if (!calls[scope]) throw new AdapterError(`maintenance scope ${scope}: want push or pop`);
  return await calls[scope][how]();
}

// successList is an ack's or a renewal's per-message success flags.
const successList = (results) => results.map((r) => r.success);

// buildTransaction adds the step's ops to the transaction builder through its own calls.
function buildTransaction(st, tb, ops) {
  for (const o of ops) {
    if (o.push) {
      let tq = tb.queue(o.push.queue);
      if (o.push.partition !== undefined) tq = tq.partition(o.push.partition);
      tb = tq.push(items(o.push.items));
    } else if (o.ack) {
      const [m] = st.messages(o.ack.messages, [o.ack.index]);
      tb = tb.ack(m, o.ack.status, {
        ...(o.ack.group ? { group: o.ack.group } : {}),
        ...(o.ack.error ? { error: o.ack.error } : {}),
        ...(o.ack.withoutLease ? { withoutLease: true } : {}),
      });
    } else if (o.kv) {
      tb = txKv(tb, o.kv);
    } else if (o.timer) {
      tb = tb.timer(o.timer.queue, o.timer.key, timerSchedule(o.timer));
    } else if (o.cancelTimer) {
      tb = tb.cancelTimer(o.cancelTimer.queue, o.cancelTimer.key);
    } else {
      throw new AdapterError("transaction op needs push, ack, kv, timer or cancelTimer");
    }
  }
  return tb;
}

// queueSteps are the queue-plane steps; like stateSteps they run with this = the CaseState, but
// they answer SDK errors themselves (with the partial results the SDK reports).
const queueSteps = {
  async push(c, a) {
    try {
      // deadlineMs is the caller's deadline for the call: withDeadline around it.
      const send = () => builder(c, a).push(items(a.items));
      const res = await (a.deadlineMs > 0 ? withDeadline(a.deadlineMs, send) : send());
      return { items: res.map((r) => ({ status: r.status, messageId: r.messageId, transactionId: r.transactionId })) };
    } catch (err) {
      const out = { error: sdkErr(err) };
      if (err instanceof PushError) out.items = err.results.map((r) => ({ status: r.status, messageId: r.messageId, transactionId: r.transactionId }));
      return out;
    }
  },
  // bufferPush pushes the items into the client's push buffer for the queue and partition, then
  // flushes it (the flush interval is long, so only that flush sends); it reports the error
  // callback's calls (onError; dropped: the transaction ids of the items dropped) and the
  // client's buffer stats after the flush.
  async bufferPush(c, a) {
    const onError = [];
    const dropped = [];
    const opts = {
      timeMillis: 60_000,
      onError: (err, droppedItems) => {
        onError.push(errKind(err));
        for (const it of droppedItems ?? []) dropped.push(it.transactionId);
      },
    };
    if (a.messageCount !== undefined) opts.messageCount = a.messageCount;
    if (a.retryDelayMs !== undefined) opts.retryDelayMillis = a.retryDelayMs;
    if (a.maxSize !== undefined) opts.maxSize = a.maxSize;
    // pushTimeoutMs bounds the push's wait for room with a signal; its end queues nothing and the step does not flush.
    const bound = new AbortController();
    const timer = a.pushTimeoutMs > 0 ? setTimeout(() => bound.abort(), a.pushTimeoutMs) : undefined;
    const out = {};
    try {
      const buf = builder(c, a).buffer(opts);
      await buf.push(items(a.items), { signal: bound.signal });
      clearTimeout(timer);
      await buf.flush({ timeoutMillis: a.flushTimeoutMs > 0 ? a.flushTimeoutMs : 10_000 });
    } catch (err) {
      if (bound.signal.aborted && err === bound.signal.reason) out.pushTimedOut = true;
      else out.error = sdkErr(err);
    } finally {
      clearTimeout(timer);
    }
    return { ...out, onError, dropped, stats: c.bufferStats() };
  },
  async pop(c, a) {
    try {
      const pr = await builder(c, a).popResult();
      if (a.save) this.saved.set(a.save, pr.messages);
      return popSummary(pr);
    } catch (err) {
      return { error: sdkErr(err) };
    }
  },
  async ack(c, a) {
    let ms = this.messages(a.messages, a.indices);
    // transactionId names another message under the saved messages' lease.
    if (a.transactionId) ms = ms.map((m) => ({ ...m, transactionId: a.transactionId }));
    const opts = {};
    if (a.group) opts.group = a.group;
    if (a.error) opts.error = a.error;
    if (a.withoutLease) opts.withoutLease = true;
    try {
      const res = await c.ack(ms, a.status, opts);
      return { success: successList(res), results: res };
    } catch (err) {
      const out = { error: sdkErr(err) };
      if (err instanceof AckError) { out.success = successList(err.results); out.results = err.results; }
      return out;
    }
  },
  async renew(c, a) {
    try {
      const res = await c.renew(this.messages(a.messages), { seconds: a.seconds });
      return { success: successList(res) };
    } catch (err) {
      return { error: sdkErr(err) };
    }
  },
  async transaction(c, a) {
    let tb = c.transaction();
    try {
      tb = buildTransaction(this, tb, a.ops ?? []);
    } catch (err) {
      return { ok: false, error: sdkErr(err) }; // a refusal while building: nothing sent
    }
    try {
      const res = await tb.commit();
      const out = { ok: true };
      if (res.kv?.length) out.kv = res.kv;
      return out;
    } catch (err) {
      return { ok: false, error: sdkErr(err) };
    }
  },
  async configure(c, a) {
    try {
      const labels = {};
      if (a.namespace) labels.namespace = a.namespace;
      if (a.task) labels.task = a.task;
      await c.admin.configureQueue(a.queue, a.options ?? {}, labels);
      return { ok: true };
    } catch (err) {
      return { ok: false, error: sdkErr(err) };
    }
  },
  async seek(c, a) {
    let to;
    if (a.toEnd) to = { toEnd: true };
    else {
      const t = this.marks.get(a.mark);
      if (!t) throw new AdapterError(`no mark ${a.mark}`);
      to = { timestamp: t };
    }
    try {
      if (a.partition !== undefined) await c.admin.seekConsumerGroupPartition(a.group, a.queue, a.partition, to);
      else await c.admin.seekConsumerGroup(a.group, a.queue, to);
      return { ok: true };
    } catch (err) {
      return { ok: false, error: sdkErr(err) };
    }
  },
  async mark(c, a) {
    this.marks.set(a.name, new Date());
    return { ok: true };
  },
  // close closes the case's client in the middle of the case (the case's end closes it again,
  // which is safe), so the steps after it run on a closed client.
  // logs answers the records the client's logger got so far, at the step's level or above.
  async logs(c, a) {
    if (!this.logged) throw new AdapterError("logs: the case's client has no captureLogs");
    const least = LEVELS.indexOf(a.level ?? "debug");
    if (least < 0) throw new AdapterError(`logs: level ${a.level}, want debug, info, warn or error`);
    return { records: this.logged.filter((r) => LEVELS.indexOf(r.level) >= least) };
  },
  async close(c) {
    try {
      await c.close({ timeoutMillis: 5000 });
      return { ok: true };
    } catch (err) {
      return { ok: false, error: sdkErr(err) };
    }
  },
  async sleep(c, a) {
    await sleep(a.ms ?? 0);
    return {};
  },
  async dlqAll(c, a) {
    const q = { queue: a.queue, ...pick(a, "limit") };
    if (a.group) q.consumerGroup = a.group;
    // save also keeps the dead letters handed over, in walk order, for dlqReplay
    const kept = [];
    if (a.save) this.dlq.set(a.save, kept);
    return this.walk(c.admin.allDlq(q), a, (m) => kept.push(m));
  },
  // walkResume takes the rest of a paused walk's rows (pauseAfter: that many more).
  async walkResume(c, a) {
    const w = this.walks.get(a.walk);
    if (!w) throw new AdapterError(`no walk saved as ${a.walk}`);
    return w.take(a.pauseAfter ?? 0);
  },
  async dlq(c, a) {
    const q = { queue: a.queue, ...pick(a, "limit", "offset"), ...this.after(a) };
    if (a.group) q.consumerGroup = a.group;
    try {
      const list = await c.admin.listDlq(q);
      if (a.save) {
        this.dlq.set(a.save, list.messages ?? []);
        this.pages.set(a.save, list.nextAfter);
      }
      const data = (list.messages ?? []).map((m) => m.data);
      return { count: data.length, data, rows: list.messages ?? [], truncated: list.truncated, nextAfter: list.nextAfter };
    } catch (err) {
      return { error: sdkErr(err) };
    }
  },
  async consume(c, a) {
    return this.consume(a);
  },
  // iterate ranges over messages() until the iteration ends on its own (limit, idle, a terminal
  // error) or the body breaks at message `break` (1-based); at maxMs the signal is aborted
  // (timedOut).
  async iterate(c, a) {
    let q = builder(c, a);
    q = loopSettings(q, a);
    const onError = [];
    q = q.onError((err) => onError.push(errKind(err)));
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), a.maxMs > 0 ? a.maxMs : 20_000);
    const handled = [];
    const byPartition = {};
    const out = {};
    try {
      for await (const m of q.messages({ signal: ctl.signal })) {
        handled.push(m.data);
        (byPartition[m.partition] ??= []).push(m.data);
        if (handled.length === a.break) break;
      }
    } catch (err) {
      out.error = sdkErr(err);
    } finally {
      clearTimeout(timer);
    }
    if (ctl.signal.aborted) out.timedOut = true;
    return { ...out, handled, byPartition, onError };
  },
};

// steps is every op the adapter runs (docs/conformance.md); a missing op is reported as unsupported.
const stepsByOp = { ...queueSteps, ...stateSteps };

class CaseState {
  constructor(client) {
    this.client = client;
    this.saved = new Map();
    this.dlq = new Map();
    this.walked = new Map(); // the messages a message walk handed over, by its save name
    this.pages = new Map(); // a listing page's nextAfter, by the save name of its step
    this.marks = new Map();
    this.walks = new Map(); // walks a step paused, by its save name, for walkResume
  }

  // walk runs a walk step: every row, or with pauseAfter the first rows, the walk left open under save for a walkResume step.
  async walk(rows, a, kept = () => {}) {
    if (a.save && this.walks.has(a.save)) throw new AdapterError(`a walk is already saved as ${a.save}`);
    const w = openWalk(rows, kept);
    if (a.save) this.walks.set(a.save, w);
    try {
      return await w.take(a.pauseAfter ?? 0);
    } finally {
      if (!a.save) await w.stop();
    }
  }

  // after places a listing page: the raw key after, or afterPage, the nextAfter of a page an
  // earlier step saved (a key is opaque, so a case cannot write one).
  after(a) {
    if (!a.afterPage) return pick(a, "after");
    const next = this.pages.get(a.afterPage);
    if (!next) throw new AdapterError(`no saved page ${a.afterPage} with a nextAfter`);
    return { after: next };
  }

  messages(name, indices) {
    const ms = this.saved.get(name);
    if (!ms) throw new AdapterError(`no saved messages ${name}`);
    if (!indices) return ms;
    return indices.map((i) => {
      if (i < 0 || i >= ms.length) throw new AdapterError(`saved messages ${name} have no index ${i}`);
      return ms[i];
    });
  }

  async step(op, a) {
    if (!Object.hasOwn(stepsByOp, op)) return { unsupported: op };
    try {
      return await stepsByOp[op].call(this, this.client, a);
    } catch (err) {
      // SDK errors are results; anything else is an adapter bug (adapterError).
      if (!(err instanceof LanesError)) throw err;
      return { error: errKind(err) };
    }
  }

  async consume(a) {
    let q = builder(this.client, a);
    if (a.concurrency > 0) q = q.concurrency(a.concurrency);
    q = loopSettings(q, a);
    if (a.renewEveryMs > 0) q = q.renewLease(true, a.renewEveryMs);
    if (a.softStopTimeoutMs > 0) q = q.softStopTimeoutMillis(a.softStopTimeoutMs);
    if (a.reportHandlerErrors) q = q.reportHandlerErrors(true);
    const h = a.handler ?? {};
    const handled = [];
    const byPartition = {};
    const onError = [];
    const failLeft = new Map();
    const failAs = new Map();
    for (const f of h.fail ?? []) {
      const k = JSON.stringify(f.data);
      failLeft.set(k, (failLeft.get(k) ?? 0) + Math.max(f.times ?? 1, 1));
      failAs.set(k, f);
    }
    let calls = 0;
    q = q.onError((err) => onError.push(errKind(err)));
    const batches = [];
    // handle runs the script for one call: the message of a consume handler, or the partition
    // slice of a consumeBatch handler (failing whole when a fail entry matches any of it).
    const handle = async (ms, signal) => {
      let fail = null;
      for (const m of ms) {
        const key = JSON.stringify(m.data);
        handled.push(m.data);
        (byPartition[m.partition] ??= []).push(m.data);
        if ((failLeft.get(key) ?? 0) > 0) {
          failLeft.set(key, failLeft.get(key) - 1);
          fail = failAs.get(key);
        }
      }
      if (h.batch) batches.push(ms.map((m) => m.data));
      calls++;
      const sleepMs = calls === 1 && h.firstSleepMs > 0 ? h.firstSleepMs : (h.sleepMs ?? 0);
      if (sleepMs > 0) {
        if (h.honourCancel) {
          await new Promise((resolve, reject) => {
            const t = setTimeout(resolve, sleepMs);
            const onAbort = () => {
              clearTimeout(t);
              reject(signal.reason ?? new Error("aborted"));
            };
            if (signal.aborted) onAbort();
            else signal.addEventListener("abort", onAbort, { once: true });
          });
        } else {
          await sleep(sleepMs);
        }
      }
      if (fail) throw handlerFailure(fail);
      if (h.ack) await this.client.ack(ms.length === 1 && !h.batch ? ms[0] : ms, h.ack);
    };
    const consumer = h.batch
      ? q.consumeBatch(async (ms, { signal }) => handle(ms, signal))
      : q.consume(async (m, { signal }) => handle([m], signal));
    const out = {};
    const maxMs = a.maxMs > 0 ? a.maxMs : 20_000;
    let terminal = null;
    const ended = consumer.closed.then(
      () => "ended",
      (err) => {
        terminal = err;
        return "ended";
      },
    );
    let stopAfterMs = a.stopAfterMs ?? 0;
    if (a.stopWhenHandled > 0) {
      // Stop relative to the handler's progress, not to the start (robust under load).
      const t0 = Date.now();
      let done = false;
      ended.then(() => (done = true));
      while (!done && handled.length < a.stopWhenHandled && Date.now() - t0 < maxMs) await sleep(5);
      stopAfterMs = Math.max(stopAfterMs, 1);
    }
    if (stopAfterMs > 0) {
      const first = await Promise.race([ended, sleep(stopAfterMs).then(() => "stop")]);
      if (first === "stop") {
        const t0 = Date.now();
        try {
          if (a.stop === "hard") await consumer.stopAndCancel({ timeoutMillis: maxMs });
          else await consumer.stop({ timeoutMillis: maxMs });
        } catch (err) {
          out.stopError = errKind(err);
        }
        out.stopMs = Date.now() - t0;
      }
    }
    let timer;
    const r = await Promise.race([ended, new Promise((res) => (timer = setTimeout(() => res("timeout"), maxMs)))]);
    clearTimeout(timer);
    if (r === "timeout") {
      out.timedOut = true;
      await consumer.stopAndCancel({ timeoutMillis: 5000 }).catch(() => {});
    }
    out.handled = handled;
    out.byPartition = byPartition;
    out.onError = onError;
    if (h.batch) out.batches = batches;
    if (terminal) out.error = errKind(terminal);
    return out;
  }
}

async function runCase(c) {
  const logged = c.client?.captureLogs ? [] : undefined;
  const client = newClient(c, logged);
  const st = new CaseState(client);
  st.logged = logged;
  const runStep = async (s, t0) => {
    let result;
    try {
      result = (await st.step(s.op, s.args ?? {})) ?? {};
    } catch (err) {
      result = { adapterError: String(err?.stack ?? err) };
    }
    result.elapsedMs = Date.now() - t0;
    return { id: s.id, result };
  };
  const steps = [];
  try {
    for (const s of c.steps) {
      const t0 = Date.now();
      // A background step (a push only) starts afterMs from now and is awaited at the case's end.
      if (s.background) steps.push(sleep(s.background.afterMs).then(() => runStep(s, t0)));
      else steps.push(await runStep(s, t0));
    }
    const results = await Promise.all(steps);
    for (const w of st.walks.values()) await w.stop().catch(() => {});
    return results;
  } finally {
    await client.close({ timeoutMillis: 5000 }).catch(() => {});
  }
}

// stringifyWithBigInts is JSON.stringify, but a bigint (a KV integer past 2^53, as the SDK reads
// it) is written as its digits, which JSON.stringify refuses to do.
function stringifyWithBigInts(value) {
  const marker = `bigint-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const text = JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? `${marker}:${v}` : v));
  return text.replace(new RegExp(`"${marker}:(-?\\d+)"`, "g"), "$1");
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
// Cases run one at a time, in arrival order.
let chain = Promise.resolve();
rl.on("line", (line) => {
  if (!line.trim()) return;
  chain = chain.then(async () => {
    let c;
    try {
      c = JSON.parse(line);
    } catch (err) {
      process.stdout.write(JSON.stringify({ error: `bad case line: ${err}` }) + "\n");
      return;
    }
    let out;
    try {
      out = { case: c.case, steps: await runCase(c) };
    } catch (err) {
      out = { case: c.case, steps: [], error: String(err?.stack ?? err) };
    }
    process.stdout.write(stringifyWithBigInts(out) + "\n");
  });
});
rl.on("close", () => {
  chain.then(() => process.exit(0));
});
