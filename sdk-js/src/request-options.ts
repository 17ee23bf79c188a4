// The options every call that sends a request takes last (docs/sdk-design.md §0).

/** RequestOptions cancel one call: aborting `signal` aborts its request in flight and any retry wait at once, sends nothing after it, and rejects the call with the signal's reason (`AbortSignal.timeout(ms)` gives a call a deadline that way). A call whose last argument already is an options object (`ack`, `renew`, `create`, `configureQueue`, KV writes) takes `signal` there; the listings take it after their query, as the walks do. */
export interface RequestOptions {
  signal?: AbortSignal | undefined;
}
