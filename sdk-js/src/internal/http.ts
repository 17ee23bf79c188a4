// The transport: global fetch, per-attempt timeout, failover between broker URLs, and the
// retry loop around decideRetry (docs/retries.md). A 204 is returned without reading a body.
import { AsyncLocalStorage } from "node:async_hooks";
import { subscribe } from "node:diagnostics_channel";
import { APIConnectionError, APITimeoutError, InvalidNameError, OutcomeUnknownError, UnexpectedAnswerError, errorForStatus, type APIError } from "../errors.js";
import { currentDeadline } from "../deadline.js";
import { decideRetry, parseRetryHint, type RetryPolicy } from "../retry.js";
import { parseLossless, stringifyLossless } from "./losslessjson.js";
import type { Log } from "./log.js";
import { NodeHttpFetch, appDispatcherInstalled, nodeHttpReachable, type CutAttempt, type FetchAnswer, type PopCut } from "./popcut.js";

/** DOT_SEGMENT is a path segment a URL parser removes with what it names ("%2e" counts as a dot). */
const DOT_SEGMENT = /^(\.|%2e){1,2}$/i;
/** USER_AGENT names the SDK in every request, as the Go and Python SDKs name themselves, so a broker's or proxy's logs tell the three apart. */
const USER_AGENT = "lanes-mq-js/0.0.0";

/** refuseDotSegments throws InvalidNameError, before anything is sent, when a name put in the path is "." or "..": fetch would remove that segment (and the one before it), so the call would reach another route, e.g. GET /api/v1/timers/../status read the broker's status as a timer. */
function refuseDotSegments(req: Request): void {
  for (const segment of req.path.split("/")) {
    if (DOT_SEGMENT.test(segment)) {
      throw new InvalidNameError("path segment", decodeURIComponent(segment), 'must not be "." or ".." (URL clients drop such path segments)', `${req.method} ${req.path}`);
    }
  }
}

/** Request is one logical call; the transport may make several attempts. */
export interface Request {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** path starts with "/", without query. */
  path: string;
  /** query is appended verbatim after "?" (already encoded, order kept). */
  query?: string | undefined;
  /** body is JSON-encoded once, before the first attempt. */
  body?: unknown;
  /** longPoll marks a pop with wait=true: 429 retried without a bound. */
  longPoll?: boolean | undefined;
  /** notIdempotent marks a write a repeat could apply twice: resent only when the broker certainly did not apply it. */
  notIdempotent?: boolean | undefined;
  /** timeoutMillis overrides the per-attempt timeout. */
  timeoutMillis?: number | undefined;
  /** signal cancels the call (attempts and sleeps). */
  signal?: AbortSignal | undefined;
  /** deadline (epoch ms): never sleep past it; the earlier of it and an enclosing withDeadline applies. */
  deadline?: number | undefined;
  /** cut, on a consumer's or iterator's pop, half-closes the attempt at the loop's stop (popcut.ts). */
  cut?: PopCut | undefined;
  /** lossless (the KV routes) sends a bigint as its digits and reads an integer past Number.MAX_SAFE_INTEGER as a bigint (losslessjson.ts). */
  lossless?: boolean | undefined;
}

/** Response is a 2xx answer; `body` is undefined for 204 and empty bodies. A body that is not JSON throws UnexpectedAnswerError. */
export interface Response<T> {
  status: number;
  body: T;
  headers: Headers;
  attempts: number;
}

export interface TransportOptions {
  urls: string[];
  bearerToken?: string | (() => string | Promise<string>) | undefined;
  headers?: Record<string, string> | undefined;
  timeoutMillis: number;
  healthRetryAfterMillis: number;
  policy: RetryPolicy;
  log: Log;
  fetch?: typeof fetch | undefined;
  now?: () => number;
  random?: () => number;
}

/** AttemptTrace is what Node's fetch (undici) reported of one attempt: whether it made a request, and whether it wrote that request's head to a connection. */
interface AttemptTrace {
  created: boolean;
  sent: boolean;
}

// undici publishes a request's creation in the caller's async context and the writing of its
// head on the connection later; the request object ties the two to the attempt. A fetch that
// publishes neither (one passed in `fetch`) proves nothing, so its failures stay ambiguous.
const attemptScope = new AsyncLocalStorage<AttemptTrace>();
const attemptOfRequest = new WeakMap<object, AttemptTrace>();
subscribe("undici:request:create", (m) => {
  const trace = attemptScope.getStore();
  const request = (m as { request?: object }).request;
  if (trace && request) {
    trace.created = true;
    attemptOfRequest.set(request, trace);
  }
});
subscribe("undici:client:sendHeaders", (m) => {
  const request = (m as { request?: object }).request;
  const trace = request && attemptOfRequest.get(request);
  if (trace) trace.sent = true;
});

/** sleep waits `ms` or until `signal` aborts (then it rejects with the signal's reason). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    if (ms <= 0) return resolve();
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

class AttemptTimeout extends Error {
  /** byDeadline: the caller's deadline, not the per-attempt timeout, ended the attempt. */
  constructor(
    message: string,
    readonly byDeadline: boolean,
  ) {
    super(message);
  }
}

export class Transport {
  private readonly urls: string[];
  private readonly unhealthyUntil = new Map<string, number>();
  private readonly fetchImpl: typeof fetch;
  /**
   * nodeHttpFetch makes the requests the SDK's own fetch would make, over node:http (popcut.ts), which
   * names a request's socket (a loop's pop is half-closed at a stop through it) and costs far
   * less: Node 20's fetch spent about four times its CPU on a request (590 against 146 µs a
   * one-message push, 8 at a time). Undefined on a caller's fetch or outside Node; unused while
   * the app has a global dispatcher (a proxy, a CA node:http would bypass), where a cut aborts,
   * and for a write that is not idempotent, whose failure needs undici's report of whether its
   * head left (AttemptTrace).
   */
  private readonly nodeHttpFetch: NodeHttpFetch | undefined;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly opts: Omit<TransportOptions, "bearerToken">;
  // A real private field, unlike TypeScript's `private`: util.inspect, console.log and
  // JSON.stringify of a client never show the token.
  readonly #bearerToken: string | (() => string | Promise<string>) | undefined;
  /**
   * baseHeaders: the SDK's accept and user-agent, replaced by the caller's `headers` in any letter
   * case; names in lower case, so fetch sends each once instead of joining the spellings' values.
   */
  private readonly baseHeaders: Record<string, string>;

  constructor(opts: TransportOptions) {
    const { bearerToken, ...rest } = opts;
    this.opts = rest;
    this.#bearerToken = bearerToken;
    this.baseHeaders = { accept: "application/json", "user-agent": USER_AGENT };
    for (const [name, value] of Object.entries(opts.headers ?? {})) this.baseHeaders[name.toLowerCase()] = value;
    this.urls = opts.urls.map((u) => u.replace(/\/+$/, ""));
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.nodeHttpFetch = opts.fetch === undefined && nodeHttpReachable() ? new NodeHttpFetch() : undefined;
    this.now = opts.now ?? Date.now;
    this.random = opts.random ?? Math.random;
  }

  private pickUrl(tried: Set<string>, sticky: string | undefined): { url: string; untriedHealthy: boolean } {
    if (sticky) return { url: sticky, untriedHealthy: false };
    const now = this.now();
    const healthy = this.urls.filter((u) => (this.unhealthyUntil.get(u) ?? 0) <= now);
    const fresh = healthy.find((u) => !tried.has(u));
    if (fresh) return { url: fresh, untriedHealthy: true };
    // All healthy ones tried, or none healthy: try them in order anyway.
    const url = healthy[0] ?? this.urls.find((u) => !tried.has(u)) ?? this.urls[0]!;
    return { url, untriedHealthy: false };
  }

  private hasUntriedHealthy(tried: Set<string>): boolean {
    const now = this.now();
    return this.urls.some((u) => !tried.has(u) && (this.unhealthyUntil.get(u) ?? 0) <= now);
  }

  /** request runs one logical call through the retry policy and returns the 2xx answer or throws. */
  async request<T>(req: Request): Promise<Response<T>> {
    refuseDotSegments(req);
    const payload = req.body === undefined ? undefined : req.lossless ? stringifyLossless(req.body) : JSON.stringify(req.body);
    const parse = req.lossless ? parseLossless : JSON.parse;
    const scoped = currentDeadline();
    const deadline = scoped !== undefined && (req.deadline === undefined || scoped < req.deadline) ? scoped : req.deadline;
    const tried = new Set<string>();
    let retries429 = 0;
    let retries5xx = 0;
    let sticky: string | undefined; // a 429 retries in place on the same broker
    let attempts = 0;
    const cut = req.cut;
    for (;;) {
      if (cut?.signal.aborted) throw cut.signal.reason;
      const { url } = this.pickUrl(tried, sticky);
      sticky = undefined;
      tried.add(url);
      attempts += 1;
      const full = `${url}${req.path}${req.query ? `?${req.query}` : ""}`;
      const headers: Record<string, string> = { ...this.baseHeaders };
      // The token replaces a caller's authorization, as in Go; a caller's content-type stays.
      const token = typeof this.#bearerToken === "function" ? await this.#bearerToken() : this.#bearerToken;
      if (token) headers.authorization = `Bearer ${token}`;
      if (payload !== undefined && headers["content-type"] === undefined) headers["content-type"] = "application/json";
      headers["x-retry-count"] = String(retries429 + retries5xx);

      // The attempt ends at the deadline at the latest (at least 1 ms, so it still reports a timeout).
      // A per-attempt timeout of 0 is none: only a deadline or the signal ends the attempt.
      const perAttempt = (req.timeoutMillis ?? this.opts.timeoutMillis) || Infinity;
      const left = deadline === undefined ? Infinity : deadline - this.now();
      const timeoutMs = Math.max(1, Math.min(perAttempt, left));
      const ctl = new AbortController();
      const timer =
        timeoutMs === Infinity ? undefined : setTimeout(() => ctl.abort(new AttemptTimeout(`timeout after ${timeoutMs} ms`, left < perAttempt)), timeoutMs);
      const onAbort = () => ctl.abort(req.signal?.reason);
      if (req.signal?.aborted) {
        clearTimeout(timer);
        throw req.signal.reason;
      }
      req.signal?.addEventListener("abort", onAbort, { once: true });

      let res: FetchAnswer | undefined;
      let text: string | undefined;
      let netErr: unknown;
      const trace: AttemptTrace = { created: false, sent: false }; // filled by undici on the fetch path
      const init = { method: req.method, headers, body: payload ?? null, signal: ctl.signal };
      const cutAttempt: CutAttempt = { abort: (reason) => ctl.abort(reason) };
      const leaveCut = cut?.enter(cutAttempt);
      try {
        res =
          this.nodeHttpFetch && req.notIdempotent !== true && !appDispatcherInstalled()
            ? await this.nodeHttpFetch.fetch(full, init, (socket) => cut?.onConnection(cutAttempt, socket))
            : await attemptScope.run(trace, () => this.fetchImpl(full, init));
        if (res.status !== 204) text = await res.text();
      } catch (err) {
        netErr = ctl.signal.reason instanceof AttemptTimeout ? ctl.signal.reason : err;
        res = undefined;
      } finally {
        leaveCut?.();
        clearTimeout(timer);
        req.signal?.removeEventListener("abort", onAbort);
      }
      if (req.signal?.aborted) throw req.signal.reason;
      // A cut pop ends with what it was answered: a 2xx is returned (the loop releases its messages), anything else is the stop, never retried.
      if (cut?.signal.aborted && !(res && res.status < 400)) throw cut.signal.reason;

      if (res && res.status < 400) {
        let body: unknown = undefined;
        if (res.status !== 204 && text) {
          try {
            body = parse(text);
          } catch (err) {
            // A proxy's page or a broker of another version: the request may have been applied.
            throw new UnexpectedAnswerError(`${req.method} ${req.path}: cannot decode the answer: ${errMessage(err)}`, { status: res.status, body: text, cause: err });
          }
        }
        return { status: res.status, body: body as T, headers: res.headers, attempts };
      }

      const now = this.now();
      // An attempt the caller's deadline cut says nothing about the broker (as a Go context deadline).
      const byDeadline = netErr instanceof AttemptTimeout && netErr.byDeadline;
      if ((!res || res.status >= 500 || res.status === 408) && !byDeadline) {
        this.unhealthyUntil.set(url, now + this.opts.healthRetryAfterMillis);
      }
      const decision = decideRetry({
        policy: this.opts.policy,
        retries429,
        retries5xx,
        longPoll: req.longPoll === true,
        status: res?.status,
        headers: res?.headers,
        networkError: res === undefined,
        // A failure before the request's head was written (the per-attempt timeout ending the connect too) proves it never left.
        notSent: res === undefined && (failedBeforeSend(netErr) || (trace.created && !trace.sent)),
        notIdempotent: req.notIdempotent === true,
        failoverAvailable: this.hasUntriedHealthy(tried),
        now,
        deadline,
        random: this.random(),
      });
      if (decision.action === "retry") {
        this.opts.log.debug(`retry ${req.method} ${req.path}: ${decision.reason} delay=${Math.round(decision.delayMs)}ms url=${url}`);
        if (decision.kind === "429") {
          retries429 += 1;
          sticky = url;
        } else {
          retries5xx += 1;
        }
        // A cut ends the sleep too (the loop's pops carry no signal of their own, so `any` is rarely built).
        await sleep(decision.delayMs, cut && req.signal ? AbortSignal.any([req.signal, cut.signal]) : (cut?.signal ?? req.signal));
        continue;
      }
      // Give up: surface the error.
      let err: APIError | APIConnectionError;
      if (!res) {
        const msg = `${req.method} ${req.path}: no response from ${url}: ${errMessage(netErr)}`;
        const E = netErr instanceof AttemptTimeout ? APITimeoutError : APIConnectionError;
        err = new E(msg, { cause: netErr, attempts, url });
      } else {
        err = buildAPIError(res, text, attempts, decision.action === "stop" ? decision.retryAfterMs : undefined, now, parse);
      }
      throw decision.action === "stop" && decision.outcomeUnknown ? new OutcomeUnknownError(err, attempts) : err;
    }
  }
}

// Codes of a connection that could not be made: the request never left, so even a write that is
// not idempotent may be resent.
const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

/** failedBeforeSend reports a fetch failure that happened while connecting. */
function failedBeforeSend(err: unknown): boolean {
  const cause = (err as { cause?: { code?: unknown; syscall?: unknown } } | undefined)?.cause;
  if (!cause) return false;
  return NOT_SENT_CODES.has(String(cause.code)) || cause.syscall === "connect" || cause.syscall === "getaddrinfo";
}

function errMessage(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message} (${cause.message})` : err.message;
  }
  return String(err);
}

function buildAPIError(res: FetchAnswer, text: string | undefined, attempts: number, retryAfterMs: number | undefined, now: number, parse: (text: string) => unknown) {
  let body: unknown = text;
  let code = "";
  let message = res.statusText || `HTTP ${res.status}`;
  if (text) {
    try {
      body = parse(text);
      if (body && typeof body === "object") {
        const b = body as { code?: unknown; error?: unknown };
        if (typeof b.code === "string") code = b.code;
        if (typeof b.error === "string") message = b.error;
      }
    } catch {
      // not JSON (a proxy's page, a bare 413): code stays ""
    }
  }
  const retryAfter = retryAfterMs ?? parseRetryHint(res.headers, now);
  return errorForStatus({ status: res.status, code, message, body, retryAfter, attempts });
}
