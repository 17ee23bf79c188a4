// KV state helpers (`/api/v1/kv`).
import { bodyPages, wholeListingPage } from "./admin.js";
import { InvalidValueError, LanesError, resultsOf } from "./errors.js";
import type { Core } from "./internal/core.js";
import { jsonProblem } from "./internal/payload.js";
import type { RequestOptions } from "./request-options.js";
import { kvOpsIdempotent } from "./retry.js";
import type { KvListResult, KvNamespaceList, KvOperation, KvResult } from "./types.js";

/** KvExpiry says how long a written key lives: `{ttlSeconds}` or `{forever: true}` (the broker requires exactly one). */
export type KvExpiry = { ttlSeconds: number } | { forever: true };

/** expiryFields is an expiry's wire fields, by the rule all three SDKs share: `{forever: true}` is no expiry; a positive `ttlSeconds` is whole seconds, at least 1, so a sub-second one still expires; 0 or a negative one (a computed ttl that ran out) is sent as it is, so the broker refuses it (BadRequestError) rather than keeping the key forever. A missing expiry throws LanesError before anything is sent. */
export function expiryFields(expiry: KvExpiry): { ttlSeconds: number } | { forever: true } {
  if (!expiry || (!("forever" in expiry) && typeof expiry.ttlSeconds !== "number")) throw new LanesError("kv: give {ttlSeconds: n > 0} or {forever: true}");
  if ("forever" in expiry) return { forever: true };
  const ttl = expiry.ttlSeconds;
  return { ttlSeconds: ttl > 0 ? Math.max(1, Math.floor(ttl)) : ttl };
}

/** kvWriteOp builds a put / putIfAbsent operation; it throws InvalidValueError for a value JSON cannot hold as given (a bigint it can: it is sent as its digits). */
export function kvWriteOp(op: "put" | "putIfAbsent", ns: string, key: string, value: unknown, expiry: KvExpiry, opts: { expect?: number | undefined; required?: boolean | undefined }): KvOperation {
  const lifetime = expiryFields(expiry);
  const problem = jsonProblem(value, "value", { bigint: true });
  if (problem) throw new InvalidValueError(`kv ${op} ${JSON.stringify(key)}: ${problem}`);
  const out: KvOperation = { op, ns, key, value: value as KvOperation["value"], ...lifetime };
  if (opts.expect !== undefined) out.expect = opts.expect;
  if (opts.required !== undefined) out.required = opts.required;
  return out;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** incrForWire returns the incr operation as sent: a number delta, min or max past Number.MAX_SAFE_INTEGER as the bigint of its exact value (JSON.stringify would write -(2 ** 63) as -9223372036854776000, past int64). One that is not an integer (NaN, Infinity, 1.5) or that int64 cannot hold throws InvalidValueError, unsent. */
function incrForWire(op: KvOperation): KvOperation {
  const out: KvOperation = { ...op };
  for (const field of ["delta", "min", "max"] as const) {
    const v = op[field];
    if (v === undefined) continue;
    if (typeof v === "number" && !Number.isInteger(v)) {
      throw new InvalidValueError(`kv incr ${JSON.stringify(op.key)}: ${field} ${v} is not an integer`);
    }
    const exact = typeof v === "bigint" ? v : Number.isSafeInteger(v) ? undefined : BigInt(v);
    if (exact === undefined) continue;
    if (exact < INT64_MIN || exact > INT64_MAX) {
      throw new InvalidValueError(`kv incr ${JSON.stringify(op.key)}: ${field} ${exact} is outside int64, which the broker's counters hold`);
    }
    out[field] = exact;
  }
  return out;
}

/** incrOp builds an incr operation (min and max only when given). */
export function incrOp(ns: string, key: string, delta: number | bigint, expiry: KvExpiry, opts: { min?: number | bigint | undefined; max?: number | bigint | undefined; required?: boolean | undefined }): KvOperation {
  const op: KvOperation = { op: "incr", ns, key, delta, ...expiryFields(expiry) };
  if (opts.min !== undefined) op.min = opts.min;
  if (opts.max !== undefined) op.max = opts.max;
  if (opts.required !== undefined) op.required = opts.required;
  return incrForWire(op);
}

/** Kv is one KV namespace: `lanes.kv('sessions')`. Every call is one `POST /api/v1/kv`; business outcomes (`applied:false`) are results, not errors. Every call takes `{ signal }` last (RequestOptions), in its options where it has some. */
export class Kv {
  /** @internal */
  constructor(
    private readonly core: Core,
    readonly namespace: string,
  ) {}

  /** batch runs raw operations (each needs `ns`) in one call and returns index-aligned results; a value JSON cannot hold as given throws InvalidValueError before anything is sent. */
  async batch(operations: KvOperation[], opts: RequestOptions = {}): Promise<KvResult[]> {
    for (const op of operations) {
      if (!("value" in op)) continue;
      const problem = jsonProblem(op.value, "value", { bigint: true });
      if (problem) throw new InvalidValueError(`kv ${op.op} ${JSON.stringify(op.key)}: ${problem}`);
    }
    return this.send(
      operations.map((op) => (op.op === "incr" ? incrForWire(op) : op)),
      opts.signal,
    );
  }
  private async send(operations: KvOperation[], signal: AbortSignal | undefined): Promise<KvResult[]> {
    const res = await this.core.transport.request<{ results: KvResult[] } | undefined>({ method: "POST", path: "/api/v1/kv", body: { operations }, notIdempotent: !kvOpsIdempotent(operations), lossless: true, signal });
    return resultsOf<KvResult>("kv", res.body?.results, operations.length, "operations", res.body);
  }
  /** one sends an operation the caller built, whose value (if any) kvWriteOp has checked. */
  private async one(op: KvOperation, signal: AbortSignal | undefined): Promise<KvResult> {
    const [r] = await this.send([op], signal);
    return r!;
  }
  /** get reads a key (`found`, `value`, `version`). */
  get(key: string, opts: RequestOptions = {}): Promise<KvResult> {
    return this.one({ op: "get", ns: this.namespace, key }, opts.signal);
  }
  /** getMany reads several keys (`rows`, `missing`); `keys` that is not an array (a lone string) throws LanesError, unsent, as Python's TypeError. */
  async getMany(keys: string[], opts: RequestOptions = {}): Promise<KvResult> {
    if (!Array.isArray(keys)) throw new LanesError(`kv getMany: keys must be an array of keys, got ${typeof keys}`);
    return this.one({ op: "getMany", ns: this.namespace, keys }, opts.signal);
  }
  /** getPrefix pages through keys with a prefix (`rows`, `truncated`, `nextAfter`); `{ signal }` comes after the page's query, as in the listings. */
  getPrefix(prefix: string, query: { after?: string | undefined; limit?: number | undefined; keysOnly?: boolean | undefined } = {}, opts: RequestOptions = {}): Promise<KvResult> {
    return this.one({ op: "getPrefix", ns: this.namespace, prefix, ...query }, opts.signal);
  }
  /** put writes a key (`expect` 0 = must not exist, N = version must be N). */
  async put(key: string, value: unknown, expiry: KvExpiry, opts: { expect?: number | undefined; required?: boolean | undefined } & RequestOptions = {}): Promise<KvResult> {
    return this.one(kvWriteOp("put", this.namespace, key, value, expiry, opts), opts.signal);
  }
  /** putIfAbsent writes a key only when it does not exist. */
  async putIfAbsent(key: string, value: unknown, expiry: KvExpiry, opts: RequestOptions = {}): Promise<KvResult> {
    return this.one(kvWriteOp("putIfAbsent", this.namespace, key, value, expiry, {}), opts.signal);
  }
  /** delete removes a key. */
  delete(key: string, opts: { expect?: number | undefined } & RequestOptions = {}): Promise<KvResult> {
    const { signal, ...fields } = opts;
    return this.one({ op: "delete", ns: this.namespace, key, ...fields }, signal);
  }
  /** incr adds `delta` to an integer key (created at 0) and returns its new `value`: a number, or a bigint past Number.MAX_SAFE_INTEGER. The broker's counters are int64: a result outside it, or outside `min`/`max`, is `applied:false, reason:"limit"`; a delta, min or max that is not an integer or lies outside int64 throws InvalidValueError, unsent; a number past Number.MAX_SAFE_INTEGER is sent as its exact value. */
  async incr(key: string, delta: number | bigint, expiry: KvExpiry, opts: { min?: number | bigint | undefined; max?: number | bigint | undefined } & RequestOptions = {}): Promise<KvResult> {
    return this.one(incrOp(this.namespace, key, delta, expiry, opts), opts.signal);
  }
  /** list pages through the namespace (console route); `{ signal }` comes after the page's query, as in the listings. */
  async list(query: { prefix?: string | undefined; after?: string | undefined; limit?: number | undefined; keysOnly?: boolean | undefined; includeExpired?: boolean | undefined } = {}, opts: RequestOptions = {}): Promise<KvListResult> {
    return (await this.core.transport.request<KvListResult>({ method: "POST", path: "/api/v1/resources/kv/list", body: { namespace: this.namespace, ...query }, lossless: true, signal: opts.signal })).body;
  }
}

/** listKvNamespaces lists every KV namespace with its key count, following the broker's pages. */
export function listKvNamespaces(core: Core, signal?: AbortSignal): Promise<KvNamespaceList> {
  return bodyPages(async (at) => {
    const query = new URLSearchParams({ limit: String(wholeListingPage) });
    if (at.offset !== undefined) query.set("offset", String(at.offset));
    if (at.after !== undefined) query.set("after", at.after);
    return (await core.transport.request<KvNamespaceList>({ method: "GET", path: "/api/v1/resources/kv/namespaces", query: query.toString(), signal })).body;
  }, "namespaces");
}
