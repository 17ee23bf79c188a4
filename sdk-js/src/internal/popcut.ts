// The soft stop of a consumer's or iterator's pop (docs/consuming.md §5): its connection is
// half-closed, not aborted. The broker answers a parked pop's half-close with 499 and claims
// nothing, and an answer it had already written still arrives whole, so the loop reads it and
// releases its messages with `retry`; an abort would drop that answer and leave them leased.
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { Socket } from "node:net";

/** CUT_WAIT_MILLIS bounds how long a half-closed pop may take to end before it is aborted. */
const CUT_WAIT_MILLIS = 2000;

/** CutAttempt is one attempt of a cut-able pop: how to abort it and, once known, its connection. */
export interface CutAttempt {
  abort(reason: unknown): void;
  socket?: Socket | undefined;
}

/** PopCut ends the pops of one consumer or iterator at its stop. */
export class PopCut {
  readonly #attempts = new Set<CutAttempt>();
  readonly #fired = new AbortController();
  #giveUp: ReturnType<typeof setTimeout> | undefined;

  /** signal aborts when the cut fires: a retry's sleep ends and no further attempt starts. */
  get signal(): AbortSignal {
    return this.#fired.signal;
  }

  /** fire half-closes every attempt whose connection is known and aborts the others (nothing of theirs was answered); what is still running after CUT_WAIT_MILLIS is aborted too. */
  fire(reason: unknown): void {
    if (this.#fired.signal.aborted) return;
    this.#fired.abort(reason);
    for (const attempt of this.#attempts) this.#cut(attempt);
    if (this.#attempts.size === 0) return;
    this.#giveUp = setTimeout(() => {
      for (const attempt of this.#attempts) attempt.abort(reason);
    }, CUT_WAIT_MILLIS);
    this.#giveUp.unref?.();
  }

  /** enter follows an attempt until the returned function is called (its answer read, or it failed). */
  enter(attempt: CutAttempt): () => void {
    this.#attempts.add(attempt);
    if (this.#fired.signal.aborted) this.#cut(attempt);
    return () => {
      this.#attempts.delete(attempt);
      if (this.#attempts.size === 0) clearTimeout(this.#giveUp);
    };
  }

  /** onConnection records the connection an attempt's request went out on, or undefined once its answer is read: the connection may then serve another request, which a cut must not touch. */
  onConnection(attempt: CutAttempt, socket: Socket | undefined): void {
    attempt.socket = socket;
    if (socket && this.#fired.signal.aborted) socket.end();
  }

  #cut(attempt: CutAttempt): void {
    if (attempt.socket) attempt.socket.end();
    else attempt.abort(this.#fired.signal.reason);
  }
}

/** nodeHttpReachable: Node's own node:http hands the SDK the socket of a request; other runtimes' emulations may not half-close it, so a cut there aborts. */
export function nodeHttpReachable(): boolean {
  const versions = (globalThis as { process?: { versions?: Record<string, string | undefined> } }).process?.versions;
  return versions?.node !== undefined && versions.bun === undefined && versions.deno === undefined;
}

// Node's fetch takes its dispatcher from these symbols (undici's setGlobalDispatcher; ".2" by undici 7+).
const GLOBAL_DISPATCHERS = [Symbol.for("undici.globalDispatcher.1"), Symbol.for("undici.globalDispatcher.2")];

/** dispatchersOf reads the global dispatchers, as Node's fetch would find them. */
function dispatchersOf(): unknown[] {
  const g = globalThis as unknown as Record<symbol, unknown>;
  return GLOBAL_DISPATCHERS.map((s) => g[s]);
}

/** nodeDefaultDispatchers are the ones Node's fetch installs for itself when it loads, read as the SDK loads; undefined when one was already set then: it cannot be told from an app's. */
const nodeDefaultDispatchers: unknown[] | undefined = (() => {
  if (dispatchersOf().some((d) => d !== undefined)) return undefined;
  void globalThis.Headers; // loads Node's fetch, which installs its default dispatcher
  return dispatchersOf();
})();

/** appDispatcherInstalled: the app set a global dispatcher for fetch (a proxy, a CA, a client certificate) that node:http would bypass, so the loops' pops must use the global fetch. */
export function appDispatcherInstalled(): boolean {
  const current = dispatchersOf();
  if (nodeDefaultDispatchers === undefined) return current.some((d) => d !== undefined);
  return current.some((d, i) => d !== nodeDefaultDispatchers[i]);
}

/** NodeHttpFetchInit is the part of a fetch's init the transport sends. */
export interface NodeHttpFetchInit {
  method: string;
  headers: Record<string, string>;
  body: string | null;
  signal: AbortSignal;
}

/** IDLE_CONNECTION_MILLIS is how long an idle connection is kept for the next pop: the global fetch's (undici's) keep-alive timeout, well inside servers' and proxies' idle timeouts, so a pop rarely meets a connection the other side just closed. */
const IDLE_CONNECTION_MILLIS = 4000;

/** NodeHttpFetch makes the SDK's requests over node:http, whose request names its socket (the global fetch hides it) so a loop's pop can be half-closed, on connections of its own: a half-closed one is never reused (the agent drops a socket that is no longer writable). */
export class NodeHttpFetch {
  // The agent's timeout ends idle connections only: each request sets its own to none, so a long poll is never cut by it.
  readonly #http = new HttpAgent({ keepAlive: true, timeout: IDLE_CONNECTION_MILLIS });
  readonly #https = new HttpsAgent({ keepAlive: true, timeout: IDLE_CONNECTION_MILLIS });

  /** fetch sends one request and resolves to its whole answer, telling `onConnection` the connection it went out on, and undefined once the answer is read (before the connection goes back to the pool); failures are rejected as the global fetch rejects them (a TypeError with the network error as its cause). A body goes with its length, as fetch sends it (node:http sets it for a body given to `end`), not chunked. */
  fetch(url: string, init: NodeHttpFetchInit, onConnection: (socket: Socket | undefined) => void): Promise<FetchAnswer> {
    const target = new URL(url);
    const secure = target.protocol === "https:";
    const send = secure ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const fail = (err: unknown) => reject(init.signal.aborted ? init.signal.reason : new TypeError("fetch failed", { cause: err }));
      const req = send(target, { method: init.method, headers: init.headers, agent: secure ? this.#https : this.#http, signal: init.signal, timeout: 0 }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", fail);
        res.on("close", () => {
          if (!res.complete) fail(new Error("the connection closed before the answer ended"));
        });
        // node:http frees the connection only after the answer's "end" listeners ran.
        res.on("end", () => {
          onConnection(undefined);
          resolve(toAnswer(res, Buffer.concat(chunks)));
        });
      });
      req.on("socket", onConnection);
      req.on("error", fail);
      req.end(init.body ?? undefined);
    });
  }
}

/** FetchAnswer is what the transport reads of an answer: a fetch Response has it, and NodeHttpFetch builds one without a Response, whose body stream took a tenth of a one-message push's CPU. */
export type FetchAnswer = Pick<globalThis.Response, "status" | "statusText" | "headers" | "text">;

/** NULL_BODY_STATUSES may not carry a body in a fetch Response. */
const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/** utf8 decodes as a Response's text() does (a leading byte order mark dropped, bad bytes replaced). */
const utf8 = new TextDecoder();

function toAnswer(res: IncomingMessage, body: Buffer): FetchAnswer {
  const headers = new Headers();
  for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) headers.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
  const status = res.statusCode ?? 0;
  const text = NULL_BODY_STATUSES.has(status) ? "" : utf8.decode(body);
  return { status, statusText: res.statusMessage ?? "", headers, text: () => Promise.resolve(text) };
}
