// A deadline over every SDK call made inside a function, like a Go context deadline: no retry
// starts whose wait would end after it (the call ends with the last real error instead), and an
// attempt in flight is cut at it (docs/retries.md §3).
import { AsyncLocalStorage } from "node:async_hooks";
import { LanesError } from "./errors.js";

const scope = new AsyncLocalStorage<number>();

/** withDeadline runs `fn` with a deadline `ms` from now over every SDK call it makes (nested deadlines: the earlier wins). A retry whose wait would pass the deadline is not attempted and the call throws its last real error (a 503 stays an APIError); an attempt still running at the deadline ends as APITimeoutError. Start long-lived consumers outside it: they would inherit it. An AbortSignal, by contrast, is a cancellation: it throws its reason. */
export function withDeadline<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  if (!Number.isFinite(ms) || ms < 0) throw new LanesError(`withDeadline: ms must be a non-negative number, got ${ms}`);
  const at = Date.now() + ms;
  const outer = scope.getStore();
  return scope.run(outer !== undefined && outer < at ? outer : at, fn);
}

/** currentDeadline is the deadline (epoch ms) of the enclosing withDeadline, if any. */
export function currentDeadline(): number | undefined {
  return scope.getStore();
}
