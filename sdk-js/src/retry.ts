// The one retry policy (docs/retries.md), as a pure function of the attempt's outcome, the
// per-call counters, the clock and a random number. The transport (internal/http.ts) is the
// only caller; tests drive it with a frozen clock.

/** RetryPolicy holds the client's retry settings (docs/retries.md §1). */
export interface RetryPolicy {
  /** retryAttempts is the number of retries after the first attempt for network failures, 408 and 5xx. */
  retryAttempts: number;
  /** retryDelayMillis is the base of the computed backoff. */
  retryDelayMillis: number;
  /** maxRetryDelayMillis caps the computed backoff. */
  maxRetryDelayMillis: number;
  /** max429Attempts bounds 429 retries on every request except a long-poll pop. */
  max429Attempts: number;
  /** maxRetryAfterMillis is the largest server hint the SDK sleeps. */
  maxRetryAfterMillis: number;
}

/** DEFAULT_RETRY_POLICY is the policy of docs/retries.md §1. */
export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  retryAttempts: 2,
  retryDelayMillis: 500,
  maxRetryDelayMillis: 8000,
  max429Attempts: 10,
  maxRetryAfterMillis: 60_000,
});

/** HeaderSource is anything with a case-insensitive `get`, such as the fetch `Headers`. */
export interface HeaderSource {
  get(name: string): string | null;
}

/** RetryInput describes one finished attempt. */
export interface RetryInput {
  policy: RetryPolicy;
  /** retries429 is the number of 429 retries already made in this call. */
  retries429: number;
  /** retries5xx is the number of network/408/5xx retries already made in this call. */
  retries5xx: number;
  /** longPoll is true for a pop with `wait=true` (429 retried without a bound). */
  longPoll: boolean;
  /** status is the HTTP status, absent when no response arrived. */
  status?: number | undefined;
  /** headers are the response headers, when a response arrived. */
  headers?: HeaderSource | undefined;
  /** networkError is true when no response arrived (connect refused, reset, DNS, timeout, a body cut off). */
  networkError?: boolean | undefined;
  /** notSent is true, with networkError, when the connection could not be made: the request never left. */
  notSent?: boolean | undefined;
  /** notIdempotent marks a write a repeat could apply twice (docs/retries.md §5, `kvOpsIdempotent`). */
  notIdempotent?: boolean | undefined;
  /** cancelled is true when the caller's signal is aborted. */
  cancelled?: boolean | undefined;
  /** failoverAvailable is true when another healthy broker URL has not been tried in this call (its retry waits 0). */
  failoverAvailable?: boolean | undefined;
  /** now is the current time in epoch milliseconds. */
  now: number;
  /** deadline is the caller's deadline in epoch milliseconds, if any. */
  deadline?: number | undefined;
  /** random is a number in [0, 1) used for jitter. */
  random: number;
}

/** RetryDecision is what the transport does next. */
export type RetryDecision =
  | { action: "done" }
  | { action: "retry"; kind: "429" | "5xx"; delayMs: number; failover: boolean; reason: string }
  | { action: "stop"; reason: string; terminal?: boolean; retryAfterMs?: number | undefined; outcomeUnknown?: boolean };

// The seconds (or milliseconds) form of a hint: digits with an optional fraction; Number() alone
// would also take "1e3", "0x10" and "Infinity".
const DECIMAL = /^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$/;
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const MONTH = MONTHS.join("|");
// The three HTTP-date forms of RFC 9110 §5.6.7, case-sensitive, always GMT. Date.parse would also
// read ISO dates, other zones, and a date without a zone in the machine's local time.
const IMF_FIXDATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (${MONTH}) ([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$`);
const RFC850_DATE = new RegExp(`^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), ([0-9]{2})-(${MONTH})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$`);
const ASCTIME_DATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (${MONTH}) ([0-9]{2}| [0-9]) ([0-9]{2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})$`);
// A hint of 10^9 s (about 31 years) or more is out of range, as in the Go SDK.
const MAX_HINT_MS = 1e12;

/** parseHTTPDate reads an HTTP-date in epoch milliseconds; the weekday is not checked against the date (it is redundant), and a two-digit RFC 850 year below 69 is 20yy, else 19yy. */
function parseHTTPDate(value: string): number | undefined {
  const pick = (m: RegExpExecArray, ...groups: number[]) => groups.map((g) => m[g] ?? "");
  let fields: string[]; // year, month, day, hour, minute, second
  let m: RegExpExecArray | null;
  if ((m = IMF_FIXDATE.exec(value))) fields = pick(m, 3, 2, 1, 4, 5, 6);
  else if ((m = RFC850_DATE.exec(value))) {
    fields = pick(m, 3, 2, 1, 4, 5, 6);
    fields[0] = (fields[0]! < "69" ? "20" : "19") + fields[0]!;
  } else if ((m = ASCTIME_DATE.exec(value))) fields = pick(m, 6, 1, 2, 3, 4, 5);
  else return undefined;
  const f = fields.map((v, i) => (i === 1 ? MONTHS.indexOf(v) : Number(v))) as [number, number, number, number, number, number];
  const at = Date.UTC(...f);
  const d = new Date(at);
  // Date.UTC rolls a day, hour, minute or second out of range over; such a date is invalid.
  const back = [d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()];
  return back.every((v, i) => v === f[i]) ? at : undefined;
}

const validHintMs = (ms: number): number | undefined => (Number.isFinite(ms) && ms > 0 && ms < MAX_HINT_MS ? ms : undefined);

/** parseRetryHint reads `retry-after-ms`, then `Retry-After` as seconds, then as an HTTP-date, with the grammar every SDK shares (docs/retries.md §3); it returns milliseconds or undefined (0, negative, out of range and unparseable hints, and dates not in the future, count as none: retrying at once would hammer a broker that answered 429 or 5xx). */
export function parseRetryHint(headers: HeaderSource | undefined, now: number): number | undefined {
  if (!headers) return undefined;
  const ms = headers.get("retry-after-ms")?.trim();
  if (ms !== undefined && DECIMAL.test(ms)) {
    const v = validHintMs(Number(ms));
    if (v !== undefined) return v;
  }
  const ra = headers.get("retry-after")?.trim();
  if (ra === undefined) return undefined;
  if (DECIMAL.test(ra)) return validHintMs(Number(ra) * 1000);
  const at = parseHTTPDate(ra);
  return at === undefined ? undefined : validHintMs(at - now);
}

/** backoff is `min(retryDelay × 2^n, maxRetryDelay) × (1 − 0.25 × random)`, n counting retries so far from 0. */
export function backoff(policy: RetryPolicy, n: number, random: number): number {
  const base = Math.min(policy.retryDelayMillis * 2 ** n, policy.maxRetryDelayMillis);
  return base * (1 - 0.25 * random);
}

const RETRYABLE_STATUS = new Set([408, 500, 502, 503, 504]);

/** decideRetry applies docs/retries.md §2 and §3 to one attempt; the first matching row decides. */
export function decideRetry(input: RetryInput): RetryDecision {
  const { policy, status, headers, now } = input;
  if (input.cancelled) return { action: "stop", reason: "cancelled" };
  if (status === 403 || status === 413) return { action: "stop", reason: `status=${status} terminal`, terminal: true };
  if (status !== undefined && status < 400) return { action: "done" };

  const shouldRetry = headers?.get("x-should-retry")?.trim().toLowerCase();
  if (shouldRetry === "false") return { action: "stop", reason: `status=${status} x-should-retry=false` };
  const hint = parseRetryHint(headers, now);

  const fits = (delayMs: number) => input.deadline === undefined || now + delayMs <= input.deadline;

  if (status === 429 && shouldRetry !== "true") {
    if (hint !== undefined && hint > policy.maxRetryAfterMillis) {
      return { action: "stop", reason: `status=429 retry-after=${hint}ms above cap`, retryAfterMs: hint };
    }
    if (!input.longPoll && input.retries429 >= policy.max429Attempts) {
      return { action: "stop", reason: `status=429 budget spent (${policy.max429Attempts})`, retryAfterMs: hint };
    }
    const delayMs = hint ?? backoff(policy, input.retries429, input.random);
    if (!fits(delayMs)) return { action: "stop", reason: "status=429 delay past deadline", retryAfterMs: hint };
    return { action: "retry", kind: "429", delayMs, failover: false, reason: `status=429 attempt=${input.retries429 + 1}` };
  }

  if (input.networkError || (status !== undefined && RETRYABLE_STATUS.has(status)) || shouldRetry === "true") {
    const what = input.networkError ? "network" : `status=${status}`;
    // Only 429, x-should-retry: true and a failed connect prove the broker did not apply it.
    if (input.notIdempotent && shouldRetry !== "true" && !(input.networkError && input.notSent)) {
      return { action: "stop", reason: `${what} after the request was sent; outcome unknown, not idempotent`, outcomeUnknown: true };
    }
    if (input.retries5xx >= policy.retryAttempts) return { action: "stop", reason: `${what} retries spent (${policy.retryAttempts})` };
    const failover = input.failoverAvailable === true;
    const delayMs = failover ? 0 : hint !== undefined && hint <= policy.maxRetryAfterMillis ? hint : backoff(policy, input.retries5xx, input.random);
    if (!fits(delayMs)) return { action: "stop", reason: `${what} delay past deadline` };
    return { action: "retry", kind: "5xx", delayMs, failover, reason: `${what} attempt=${input.retries5xx + 1}` };
  }

  return { action: "stop", reason: `status=${status}` };
}

/** KvOpLike is the part of a KV operation that decides whether it is idempotent. */
export interface KvOpLike {
  op: string;
  expect?: number | null | undefined;
}

/** kvOpsIdempotent reports whether KV ops end in the same state however often they land (reads, puts and deletes without `expect`), so a request holding them may be resent after a lost answer; an incr, a putIfAbsent or a conditional write may not (docs/retries.md §5). */
export function kvOpsIdempotent(ops: readonly KvOpLike[]): boolean {
  return ops.every((o) => o.op !== "incr" && o.op !== "putIfAbsent" && (o.expect === undefined || o.expect === null));
}
