// TransactionBuilder: pushes, acks and the KV / timer riders committed in one PostgreSQL
// transaction (`POST /api/v1/transaction`). Unlike the queue builders it accumulates state, as in
// Go and Python: every step adds to the same bundle and returns it.
import { EmptyTransactionError, InvalidItemError, LanesError, TransactionError } from "./errors.js";
import { normalizeAckStatus, toWireItems, type AckOptions, type AckTarget, type Core, type PushItem } from "./internal/core.js";
import { incrOp, kvWriteOp, type KvExpiry } from "./kv.js";
import { checkGroup } from "./names.js";
import { timerScheduleOp, type TimerSchedule } from "./timers.js";
import type { AckStatus } from "./message.js";
import { kvOpsIdempotent } from "./retry.js";
import type { KvOperation, TimerOperation, TransactionOperation, TransactionResult } from "./types.js";

interface TxState {
  operations: TransactionOperation[];
  leases: string[];
  kv: KvOperation[];
  timers: TimerOperation[];
}

/**
 * TransactionBuilder collects operations; `commit()` sends them as one bundle that commits entirely or not at all.
 * Unlike the queue builders it is a mutable collector (as in Go and Python): every step adds to this builder and
 * returns it, so a bundle may be built in one chain or step by step (`tx.ack(m); tx.queue(q).push([...]); await tx.commit()`).
 */
export class TransactionBuilder {
  private readonly s: TxState = { operations: [], leases: [], kv: [], timers: [] };

  /** @internal */
  constructor(private readonly core: Core) {}

  private add(p: Partial<TxState>): TransactionBuilder {
    if (p.operations) this.s.operations.push(...p.operations);
    if (p.leases) this.s.leases.push(...p.leases);
    if (p.kv) this.s.kv.push(...p.kv);
    if (p.timers) this.s.timers.push(...p.timers);
    return this;
  }

  /** queue starts a push into `name`: `.queue('invoices').partition('c-42').push([...])` returns the transaction builder. */
  queue(name: string): TransactionQueue {
    // A push of no items adds nothing (as in Go and Python), so a bundle can push a list that may be empty.
    return new TransactionQueue(name, undefined, (queue, partition, items) =>
      items.length === 0 ? this : this.add({ operations: [{ type: "push", items: toWireItems(queue, partition, items) }] }),
    );
  }

  /** ack acknowledges leased messages inside the bundle; the group defaults to each message's own. Their lease ids go to `requiredLeases`, so a stale lease rolls the bundle back. `withoutLease` throws LanesError: a transaction ack has no lease-less form (the broker gives it the cursor's live lease), as in Go and Python. */
  ack(messages: AckTarget | AckTarget[], status: AckStatus | boolean = "completed", opts: AckOptions = {}): TransactionBuilder {
    if (opts.withoutLease) throw new LanesError("lanes: a transaction ack cannot be lease-less (withoutLease)");
    const st = normalizeAckStatus(status);
    const list = Array.isArray(messages) ? messages : [messages];
    const ops: TransactionOperation[] = [];
    const leases: string[] = [];
    for (const m of list) {
      if (!m.transactionId || !m.partitionId) throw new LanesError("transaction ack: every message needs transactionId and partitionId");
      checkGroup("transaction ack", opts.group ?? opts.consumerGroup ?? m.consumerGroup);
      const op: TransactionOperation = {
        type: "ack",
        transactionId: m.transactionId,
        partitionId: m.partitionId,
        status: st,
        consumerGroup: opts.group ?? opts.consumerGroup ?? (m.consumerGroup || "__QUEUE_MODE__"),
      };
      if (m.leaseId) {
        op.leaseId = m.leaseId;
        leases.push(m.leaseId);
      }
      if (opts.error !== undefined) op.error = opts.error;
      ops.push(op);
    }
    return this.add({ operations: ops, leases });
  }

  /** kv adds KV operations to the bundle (`.kv.put(ns, key, value, {forever: true})`), applied first and atomically with the rest. */
  get kv(): TransactionKv {
    return new TransactionKv((op) => this.add({ kv: [op] }));
  }

  /** timer schedules a timer in the bundle: it pushes `payload` to `queue` after `delayMillis` unless cancelled. */
  timer(queue: string, key: string, schedule: TimerSchedule): TransactionBuilder {
    return this.add({ timers: [timerScheduleOp(queue, key, schedule)] });
  }

  /** cancelTimer cancels a timer in the bundle. */
  cancelTimer(queue: string, key: string): TransactionBuilder {
    return this.add({ timers: [{ op: "cancel", queue, timerKey: key }] });
  }

  /** commit sends the bundle. It returns the broker's result when it committed and throws TransactionError (with `reason`) when it rolled back — nothing was committed then. An empty bundle throws EmptyTransactionError without a request. */
  async commit(opts: { signal?: AbortSignal | undefined } = {}): Promise<TransactionResult> {
    const { operations, kv, timers } = this.s;
    if (operations.length === 0 && kv.length === 0 && timers.length === 0) {
      throw new EmptyTransactionError();
    }
    const body: Record<string, unknown> = { operations };
    const leases = [...new Set(this.s.leases)];
    if (leases.length > 0) body.requiredLeases = leases;
    if (kv.length > 0) body.kv = kv;
    if (timers.length > 0) body.timers = timers;
    // A push's ids make the resend of a committed bundle roll back as duplicate; without one, a KV
    // rider that is not idempotent could apply twice.
    const notIdempotent = !operations.some((o) => o.type === "push") && !kvOpsIdempotent(kv);
    const res = await this.core.transport.request<TransactionResult>({ method: "POST", path: "/api/v1/transaction", body, signal: opts.signal, notIdempotent, lossless: kv.length > 0 });
    if (!res.body.success) throw new TransactionError(res.body, res.attempts);
    return res.body;
  }
}

/** TransactionQueue is the push step of a transaction: `.partition(p)` then `.push(items)`. */
export class TransactionQueue {
  /** @internal */
  constructor(
    private readonly name: string,
    private readonly part: string | undefined,
    private readonly done: (queue: string, partition: string | undefined, items: unknown[]) => TransactionBuilder,
  ) {}
  /** partition names the target partition (default `Default`). */
  partition(name: string): TransactionQueue {
    return new TransactionQueue(this.name, name, this.done);
  }
  /** push adds the items (ids minted once, UUIDv7) to the transaction and returns the transaction builder; no items add nothing. */
  push<T>(items: PushItem<T>[]): TransactionBuilder {
    if (!Array.isArray(items)) throw new InvalidItemError(undefined, "want an array of items");
    return this.done(this.name, this.part, items);
  }
}

/** TransactionKv adds KV operations to a transaction; each method returns the transaction builder. */
export class TransactionKv {
  /** @internal */
  constructor(private readonly add: (op: KvOperation) => TransactionBuilder) {}
  /** put writes a key (`expect`: 0 = must not exist, N = version must be N; `required` turns a lost precondition into a rollback). */
  put(ns: string, key: string, value: unknown, expiry: KvExpiry, opts: { expect?: number | undefined; required?: boolean | undefined } = {}): TransactionBuilder {
    return this.add(kvWriteOp("put", ns, key, value, expiry, opts));
  }
  /** putIfAbsent writes a key only when it does not exist; an existing key leaves the put unapplied and the bundle commits, unless `required` (see `once`). */
  putIfAbsent(ns: string, key: string, value: unknown, expiry: KvExpiry, opts: { required?: boolean | undefined } = {}): TransactionBuilder {
    return this.add(kvWriteOp("putIfAbsent", ns, key, value, expiry, opts));
  }
  /** once is a required putIfAbsent: the whole bundle rolls back (`kv_precondition`) when the key already exists. */
  once(ns: string, key: string, expiry: KvExpiry): TransactionBuilder {
    return this.add(kvWriteOp("putIfAbsent", ns, key, true, expiry, { required: true }));
  }
  /** delete removes a key. */
  delete(ns: string, key: string, opts: { expect?: number | undefined; required?: boolean | undefined } = {}): TransactionBuilder {
    const op: KvOperation = { op: "delete", ns, key };
    if (opts.expect !== undefined) op.expect = opts.expect;
    if (opts.required !== undefined) op.required = opts.required;
    return this.add(op);
  }
  /** incr adds `delta` to an integer key; as `Kv.incr`, a delta, min or max is sent as its exact value (one not an integer or outside int64 throws InvalidValueError) and a result past Number.MAX_SAFE_INTEGER reads as a bigint. */
  incr(ns: string, key: string, delta: number | bigint, expiry: KvExpiry, opts: { min?: number | bigint | undefined; max?: number | bigint | undefined; required?: boolean | undefined } = {}): TransactionBuilder {
    return this.add(incrOp(ns, key, delta, expiry, opts));
  }
  /** get reads a key inside the bundle (the result is in `result.kv`). */
  get(ns: string, key: string): TransactionBuilder {
    return this.add({ op: "get", ns, key });
  }
}
