// The SDK's error tree (docs/retries.md §7). Every error the SDK raises is a LanesError;
// transport outcomes are APIError (a response) or APIConnectionError (no response); result
// errors (a `failed` push item, an ack or transaction body with `success:false`) carry the
// broker's per-item answer.
import type { PushResult } from "./internal/core.js";
import type { Message } from "./message.js";
import type { AckResult, TransactionReason, TransactionResult } from "./types.js";

/** LanesError is the base class of every error this SDK throws. */
export class LanesError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** APIError is a non-2xx answer the retry policy gave up on. `code` is the body's stable snake_case code ("" when the body was not JSON). `message` reads `"<status> <code>: <text>"` so a logged or uncaught error says what failed; `brokerMessage` is the text alone. */
export class APIError extends LanesError {
  /** status is the HTTP status. */
  readonly status: number;
  /** code is the stable `code` of the `{"error","code"}` body, or "". */
  readonly code: string;
  /** brokerMessage is the broker's human text alone (the body's `error`, else the status text): Go's `APIError.Message`, Python's `APIError.message`. */
  readonly brokerMessage: string;
  /** retryAfter is the server's delay hint in milliseconds, when it sent one. */
  readonly retryAfter: number | undefined;
  /** body is the parsed JSON body, or the raw text when it was not JSON. */
  readonly body: unknown;
  /** attempts is how many attempts the call made before giving up. */
  readonly attempts: number;

  constructor(init: { status: number; code: string; message: string; body: unknown; retryAfter?: number | undefined; attempts?: number }) {
    super(`${init.status}${init.code ? ` ${init.code}` : ""}: ${init.message}`);
    this.status = init.status;
    this.code = init.code;
    this.brokerMessage = init.message;
    this.retryAfter = init.retryAfter;
    this.body = init.body;
    this.attempts = init.attempts ?? 1;
  }

  /** terminal is true for every 4xx but 429: the call will not succeed as it is sent, and a consume loop ends on it (Go's `APIError.Terminal()`, Python's `terminal`; docs/consuming.md §4). */
  get terminal(): boolean {
    return this.status >= 400 && this.status < 500 && this.status !== 429;
  }
}

/** BadRequestError is a 400: the request was malformed or failed validation. */
export class BadRequestError extends APIError {}
/** AuthenticationError is a 401: the bearer token is missing or invalid. */
export class AuthenticationError extends APIError {}
/** PermissionDeniedError is a 403: terminal, the token lacks the role (consume loops stop on it). */
export class PermissionDeniedError extends APIError {}
/** NotFoundError is a 404. */
export class NotFoundError extends APIError {}
/** ConflictError is a 409. */
export class ConflictError extends APIError {}
/** PayloadTooLargeError is a 413: terminal, reshape the request (consume loops stop on it). */
export class PayloadTooLargeError extends APIError {}
/** RateLimitError is a 429 the SDK did not (or no longer) retry: the hint was above `maxRetryAfterMillis` or the 429 budget ran out. `retryAfter` says how long the broker asked to wait. */
export class RateLimitError extends APIError {}
/** InternalServerError is a 5xx after the retries ran out. */
export class InternalServerError extends APIError {}
/** NotImplementedByBrokerError is a 501 answer: a proxy, or a broker build without the route. */
export class NotImplementedByBrokerError extends APIError {}

/** APIConnectionError means no response arrived (connect refused, reset, DNS, timeout) after the retries. An OutcomeUnknownError whose last attempt timed out is also an instance of it and of APITimeoutError, as Go's errors.Is(err, ErrTimeout) matches it: a caller handling timeouts handles it (docs/retries.md §5). */
export class APIConnectionError extends LanesError {
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    // A write of unknown outcome is a timeout when its last attempt was one.
    return value instanceof OutcomeUnknownError && value.cause instanceof APITimeoutError && value.cause instanceof this;
  }

  /** attempts is how many attempts the call made. */
  readonly attempts: number;
  /** url is the broker URL of the last attempt. */
  readonly url: string;
  constructor(message: string, init: { cause?: unknown; attempts: number; url: string }) {
    super(message, { cause: init.cause });
    this.attempts = init.attempts;
    this.url = init.url;
  }
}

/** APITimeoutError is an APIConnectionError whose last attempt timed out (`timeoutMillis`). */
export class APITimeoutError extends APIConnectionError {}

/** OutcomeUnknownError means a write that is not safe to repeat (a KV incr, putIfAbsent or conditional write; a KV batch or transaction holding one and no push) failed after it was sent — a timeout, a reset, a 408 or 5xx — so the broker may have applied it and the SDK did not resend it. `cause` is the last attempt's APIError or APIConnectionError; read the state to find out (docs/retries.md §5). When that attempt timed out, the error is also an APITimeoutError (and APIConnectionError), as in Go and Python. */
export class OutcomeUnknownError extends LanesError {
  /** attempts is how many attempts the call made. */
  readonly attempts: number;
  constructor(cause: APIError | APIConnectionError, attempts: number) {
    super(`outcome unknown (not retried, the write is not idempotent): ${cause.message}`, { cause });
    this.attempts = attempts;
  }
}

/** UnexpectedAnswerError is thrown when the broker answered 2xx with a body the SDK cannot use: not JSON, or another number of results than the request had items or operations (a proxy or a broker of another version in the way). The request may have been applied, so it is not a PushError: a push sent again with the same transaction ids deduplicates. */
export class UnexpectedAnswerError extends LanesError {
  /** status is the HTTP status of an answer that is not JSON (0 for a count mismatch). */
  readonly status: number;
  /** body is the raw text of an answer that is not JSON, else the decoded answer. */
  readonly body: unknown;
  constructor(message: string, init: { status?: number; body?: unknown; cause?: unknown } = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status ?? 0;
    this.body = init.body;
  }
}

/** resultsOf returns `list` when it holds `want` results; any other answer is an UnexpectedAnswerError ("push: broker answered 0 results for 1 items"). */
export function resultsOf<T>(what: string, list: unknown, want: number, unit: string, body: unknown): T[] {
  const got = Array.isArray(list) ? (list as T[]) : [];
  if (got.length !== want) throw new UnexpectedAnswerError(`${what}: broker answered ${got.length} results for ${want} ${unit}`, { body });
  return got;
}

/** ItemError describes one pushed item the broker reported as failed (Go's `ItemError`, Python's `ItemError`). */
export interface ItemError {
  /** index is the item's position in the push. */
  index: number;
  transactionId: string;
  status: string;
  /** message is the broker's reason ("" when it gave none). */
  message: string;
}

/** PushError is thrown by a push when at least one item came back `failed` (stored nowhere). `results` holds every item's verdict, in request order; retrying the same items is safe (same transaction ids). */
export class PushError extends LanesError {
  /** results is the broker's verdict on every item of the push. */
  readonly results: PushResult[];
  /** failed is the subset of results whose status is `failed`. */
  readonly failed: PushResult[];
  /** items describes the failed items in the shape the Go and Python SDKs use. */
  readonly items: ItemError[];
  constructor(results: PushResult[]) {
    const failed = results.filter((r) => r.status === "failed");
    super(`push: ${failed.length} of ${results.length} item(s) failed${failed[0]?.error ? `: ${failed[0].error}` : ""}`);
    this.results = results;
    this.failed = failed;
    this.items = failed.map((r) => ({ index: r.index, transactionId: r.transactionId, status: r.status, message: r.error ?? "" }));
  }
}

/** InvalidItemError is thrown by a push (direct, buffered or in a transaction) when an item cannot be sent as it is: its payload is not plain JSON (BigInt, NaN, Infinity, a function, a Map or Set, binary data, a cycle), its `transactionId` or `traceId` is not a string, or it has both `data` and `payload`; or the items argument is not an array. Nothing of the call was sent or buffered. */
export class InvalidItemError extends LanesError {
  /** index is the item's position in the call; undefined when the items argument itself is not an array. */
  readonly index: number | undefined;
  constructor(index: number | undefined, reason: string) {
    super(index === undefined ? `push: ${reason}` : `push: item #${index} ${reason}`);
    this.index = index;
  }
}

/** InvalidValueError is thrown before any request by a KV put or putIfAbsent (direct or in a transaction) whose value, or a timer schedule whose payload, is not plain JSON (the payloads InvalidItemError refuses for a push). */
export class InvalidValueError extends LanesError {}

/** InvalidNameError is thrown, before anything is sent, by `buffer()`, a pop, `consume()`/`consumeBatch()` and `messages()` for a queue or partition name the broker refuses (empty, "." or "..", a NUL character, a lone surrogate, over 512 bytes): such a buffer could only drop what it holds, and fetch would send such a pop to another route. Every call that puts a name in its URL path (admin, timers, messages, DLQ replay) throws it for "." or "..", which fetch would remove with the segment before it. */
export class InvalidNameError extends LanesError {
  /** field is "queue", "partition", "group", or "path segment" for a name another call put in its URL path. */
  readonly field: string;
  /** value is the refused name (`name` is the error class's). */
  readonly value: string;
  constructor(field: string, value: string, reason: string, op = "buffer") {
    super(`${op}: ${field} name ${JSON.stringify(value)} ${reason}`);
    this.field = field;
    this.value = value;
  }
}

/** ClientClosedError is thrown by `buffer()` and by a buffer's `push` after `lanes.close()`: nothing would flush what they add. Direct calls keep working. */
export class ClientClosedError extends LanesError {
  constructor(message = "client is closed") {
    super(message);
  }
}

/** UnsentError is thrown by `lanes.close()` when buffered messages could not be sent before its deadline. They stay buffered: another `close()` or the buffer's `flush()` may still send them. */
export class UnsentError extends LanesError {
  /** unsent is how many buffered messages were left. */
  readonly unsent: number;
  constructor(unsent: number) {
    super(`close: ${unsent} buffered message(s) could not be sent before the deadline`);
    this.unsent = unsent;
  }
}

/** AckError is thrown by `ack` when at least one item answered `success:false`. `results` holds every item's answer. */
export class AckError extends LanesError {
  /** results is the broker's answer for every acknowledged item, in request order. */
  readonly results: AckResult[];
  /** failed is the subset of results with `success:false`. */
  readonly failed: AckResult[];
  constructor(results: AckResult[]) {
    const failed = results.filter((r) => !r.success);
    super(`ack: ${failed.length} of ${results.length} item(s) not applied${failed[0]?.error ? `: ${failed[0].error}` : ""}`);
    this.results = results;
    this.failed = failed;
  }
}

/** TransactionError is thrown by `commit()` when the broker rolled the bundle back (`success:false`): nothing was committed. */
export class TransactionError extends LanesError {
  /** reason is the closed rollback taxonomy (`duplicate`, `ack_rejected`, `kv_precondition`, …). */
  readonly reason: TransactionReason | undefined;
  /** result is the broker's full answer (`failedIndex`, `kvReason`, `version`, `value` on `kv_precondition`). */
  readonly result: TransactionResult;
  /** brokerMessage is the broker's text alone (the answer's `error`, "" without one), as on APIError: Go's `TransactionError.Message`, Python's `message`. */
  readonly brokerMessage: string;
  /** attempts > 1 with reason `duplicate` means an earlier attempt probably committed (docs/retries.md §5). */
  readonly attempts: number;
  /** failedIndex, kvReason, version and value are set on `kv_precondition`: the KV rider that lost, why (`exists`, `absent`, `version`, `limit`, `type`), and the key's current version and value. */
  readonly failedIndex: number | undefined;
  readonly kvReason: string | undefined;
  readonly version: number | undefined;
  readonly value: unknown;
  constructor(result: TransactionResult, attempts: number) {
    super(`transaction rolled back${result.reason ? ` (${result.reason})` : ""}${result.error ? `: ${result.error}` : ""}`);
    this.reason = result.reason;
    this.result = result;
    this.brokerMessage = result.error ?? "";
    this.attempts = attempts;
    this.failedIndex = result.failedIndex ?? undefined;
    this.kvReason = result.kvReason ?? undefined;
    this.version = result.version ?? undefined;
    this.value = result.value;
  }
}

/** EmptyTransactionError is thrown by `commit()` on a bundle with no operations, KV or timer riders; nothing is sent. */
export class EmptyTransactionError extends LanesError {
  constructor(message = "transaction has no operations to commit") {
    super(message);
  }
}

/** AutoAckDroppedError reports messages a `serverAutoAck(true)` pop took that were never handed over, because of a hard stop or an iterator left early. The broker committed them in the pop, so they will not be redelivered. */
export class AutoAckDroppedError extends LanesError {
  /** count is how many popped messages were dropped unhandled. */
  readonly count: number;
  constructor(count: number, why: string) {
    super(`${count} message(s) popped with serverAutoAck(true) dropped unhandled (${why}); the broker committed them in the pop and will not redeliver them`);
    this.count = count;
  }
}

/** errorText is a thrown value's text: an Error's message (its name when it has none), else the value as a string. A handler's failed ack carries it as its error. */
export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** MAX_NAMED_TRANSACTIONS caps the transaction ids a HandlerError's message names, so a large batch's line stays readable; `messages` holds them all. */
const MAX_NAMED_TRANSACTIONS = 5;

/** HandlerError is what onError receives, under reportHandlerErrors(true), when a handler throws: `messages` are the messages it was given (the one message of `consume`, the partition slice of `consumeBatch`) and `cause` is what it threw. `message` names the transaction ids, queue and partition, never a payload; the message's `failed` ack (and its dead letter's errorMessage) carries the handler's own text. */
export class HandlerError extends LanesError {
  readonly messages: Message[];
  constructor(messages: Message[], cause: unknown) {
    super(`handler failed on ${describeMessages(messages)}: ${errorText(cause)}`, { cause });
    this.messages = messages;
  }
}

/** describeMessages names messages by transaction id, queue and partition (one partition's, as a batch slice is), as Go's HandlerError does. */
function describeMessages(ms: Message[]): string {
  const first = ms[0];
  if (first === undefined) return "no message";
  let named = ms.slice(0, MAX_NAMED_TRANSACTIONS).map((m) => m.transactionId).join(", ");
  if (ms.length > MAX_NAMED_TRANSACTIONS) named += ` and ${ms.length - MAX_NAMED_TRANSACTIONS} more`;
  const where = `(queue ${JSON.stringify(first.queue)}, partition ${JSON.stringify(first.partition)})`;
  return ms.length === 1 ? `transaction ${named} ${where}` : `${ms.length} messages, transactions ${named} ${where}`;
}

/** ConsumerStoppedError is the abort reason of handler signals on a hard stop, and what a closed message iterator reports. */
export class ConsumerStoppedError extends LanesError {
  constructor(message = "consumer stopped") {
    super(message);
  }
}

/** errorForStatus builds the APIError subclass for an HTTP status. */
export function errorForStatus(init: { status: number; code: string; message: string; body: unknown; retryAfter?: number | undefined; attempts?: number }): APIError {
  switch (init.status) {
    case 400:
      return new BadRequestError(init);
    case 401:
      return new AuthenticationError(init);
    case 403:
      return new PermissionDeniedError(init);
    case 404:
      return new NotFoundError(init);
    case 409:
      return new ConflictError(init);
    case 413:
      return new PayloadTooLargeError(init);
    case 429:
      return new RateLimitError(init);
    case 501:
      return new NotImplementedByBrokerError(init);
    default:
      return init.status >= 500 ? new InternalServerError(init) : new APIError(init);
  }
}

/** isTerminal reports a 403 or 413: the request will not succeed as it is (docs/retries.md §2 row 2). */
export function isTerminal(err: unknown): boolean {
  return err instanceof PermissionDeniedError || err instanceof PayloadTooLargeError;
}

/** ACK_STATUSES_WAITED_OUT are the 4xx answers to an ack a consumer reports and goes on after: a timeout, a conflict (the lease moved on), a rate limit. */
const ACK_STATUSES_WAITED_OUT = new Set([408, 409, 429]);

/** endsConsumerOnAck reports whether an ack's error ends a consume loop or iterator, as the same answer to a pop would: 403, 413, any other 4xx but 408/409/429, and 501 (docs/consuming.md §4). Anything else is reported and the consumer goes on. */
export function endsConsumerOnAck(err: unknown): boolean {
  if (!(err instanceof APIError)) return false;
  if (err.status === 501) return true;
  return err.status >= 400 && err.status < 500 && !ACK_STATUSES_WAITED_OUT.has(err.status);
}

/** STATUSES_FOR_WANT_OF_A_BROKER are the answers that say the broker is not there to serve: a proxy without it (502, 504), a broker without its database (503), and a 429 the client's retries gave up on. */
const STATUSES_FOR_WANT_OF_A_BROKER = new Set([429, 502, 503, 504]);

/** brokerUnavailable reports whether err is, or wraps (through `cause`), this SDK's own error for want of a broker: no answer after the retries (APIConnectionError: refused, reset, DNS, timeout), or a 502, 503, 504 or 429 APIError. A handler failing with it has its message released with `retry`, which spends no retry, so an outage dead-letters no sound message (docs/consuming.md §3 step 5). Not a 500 nor another 4xx: a message can cause those. */
export function brokerUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 16; e = e.cause, depth++) {
    if (e instanceof APIConnectionError) return true;
    if (e instanceof APIError && STATUSES_FOR_WANT_OF_A_BROKER.has(e.status)) return true;
  }
  return false;
}

/** rateLimitOf is the 429 that err is, or wraps (through `cause`, as brokerUnavailable reads it), if any. */
export function rateLimitOf(err: unknown): RateLimitError | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 16; e = e.cause, depth++) {
    if (e instanceof RateLimitError) return e;
  }
  return undefined;
}
