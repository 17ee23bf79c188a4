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

const NUMERIC = /^\s*[+-]?(\d+(\.\d*)?|\.\d+)\s*$/;
// The asctime form of an HTTP-date carries no zone; HTTP-dates are GMT (RFC 9110 §5.6.7), while
// Date.parse would read it as local time.
const ASCTIME = /^\s*[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\s*$/;

/** parseRetryHint reads `retry-after-ms`, then `Retry-After` as seconds, then as an HTTP-date; it returns milliseconds or undefined (0, negative, NaN, infinite and unparseable hints, and dates not in the future, count as none: retrying at once would hammer a broker that answered 429 or 5xx). */
export function parseRetryHint(headers: HeaderSource | undefined, now: number): number | undefined {
  if (!headers) return undefined;
  const ms = headers.get("retry-after-ms");
  if (ms !== null && NUMERIC.test(ms)) {
    const v = Number(ms);
    if (Number.isFinite(v) && v > 0) return v;
  }
  const ra = headers.get("retry-after");
  if (ra === null) return undefined;
  if (NUMERIC.test(ra)) {
    const v = Number(ra);
    return Number.isFinite(v) && v > 0 ? v * 1000 : undefined;
  }
  const at = Date.parse(ASCTIME.test(ra) ? `${ra.trim()} GMT` : ra);
  if (!Number.isFinite(at)) return undefined;
  const delta = at - now;
  return delta > 0 ? delta : undefined;
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
