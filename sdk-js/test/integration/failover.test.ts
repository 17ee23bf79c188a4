// Several broker URLs against a real broker (docs/retries.md §4): a URL whose connection is
// refused is skipped for healthRetryAfterMillis, then asked again; a 408 or a 5xx marks a URL,
// retried or not, and any other 4xx does not (the same cases as sdk-go and sdk-python).
import { randomUUID } from "node:crypto";
import { connect, type Socket } from "node:net";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { APIError, APITimeoutError, Lanes, withDeadline, type LanesOptions } from "../../src/index.js";
import { brokerUrl, closedPortUrl, sleep } from "./helpers.js";

/** sameBrokerOtherHost swaps 127.0.0.1 and localhost: a second URL on the same real broker. */
function sameBrokerOtherHost(url: string): string {
  if (url.includes("127.0.0.1")) return url.replace("127.0.0.1", "localhost");
  expect(url).toContain("localhost");
  return url.replace("localhost", "127.0.0.1");
}

const host = (url: string) => new URL(url).host;

/** recording returns a client over `urls` whose every attempt's host lands in `seen`, then goes out for real. */
function recording(urls: string[], seen: string[], o: LanesOptions = {}): Lanes {
  const recordingFetch: typeof fetch = (input, init) => {
    seen.push(new URL(input instanceof Request ? input.url : String(input)).host);
    return fetch(input, init);
  };
  return new Lanes({ urls, env: {}, logger: null, fetch: recordingFetch, ...o });
}

describe("failover: several brokers in one string", () => {
  it("LANES_URL and url split on commas into brokers to fail over between, as Go's WithURL does", async () => {
    const dead = await closedPortUrl();
    const live = brokerUrl();
    for (const o of [{ env: { LANES_URL: ` ${dead} , ${live} ` } }, { url: `${dead},${live}` }] as LanesOptions[]) {
      const seen: string[] = [];
      const c = recording([], seen, o);
      expect((await c.health()).status).toBe("healthy");
      expect(seen).toEqual([host(dead), host(live)]);
    }
  });
});

describe("failover: healthRetryAfterMillis", () => {
  it.each([
    { name: "configured 200 ms", o: { healthRetryAfterMillis: 200 }, retried: true },
    { name: "default 5 s", o: {}, retried: false },
  ])("a failing URL is skipped, then asked again ($name)", async ({ o, retried }) => {
    const dead = await closedPortUrl();
    const live = brokerUrl();
    const seen: string[] = [];
    const c = recording([dead, live], seen, o);
    await c.health();
    expect(seen.splice(0), "the first call fails over").toEqual([host(dead), host(live)]);
    await c.health();
    expect(seen.splice(0), "the failing URL is skipped").toEqual([host(live)]);
    await sleep(400);
    await c.health();
    expect(seen.splice(0)).toEqual(retried ? [host(dead), host(live)] : [host(live)]);
  });

  it("a negative value is refused", () => {
    expect(() => new Lanes({ urls: ["http://127.0.0.1:2"], env: {}, healthRetryAfterMillis: -1 })).toThrow(/healthRetryAfterMillis must be a non-negative number/);
  });

  it.each([
    { name: "408", fault: { status: 408 }, skipped: true },
    { name: "503 x-should-retry false", fault: { status: 503, headers: { "x-should-retry": "false" } }, skipped: true },
    { name: "409", fault: { status: 409 }, skipped: false },
  ])("which answers skip a URL: $name", async ({ fault, skipped }) => {
    const base = brokerUrl();
    const run = `js-${randomUUID().slice(0, 12)}`;
    const rules = [{ method: "GET", path: "/health", responses: [fault] }];
    const res = await fetch(`${base}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
    expect(res.status, "the test broker serves no fault scripts (LANES_TEST_FAULTS)").toBe(204);
    try {
      const second = sameBrokerOtherHost(base);
      const seen: string[] = [];
      const c = recording([base, second], seen, { headers: { "X-Lanes-Test-Run": run }, retryAttempts: 0 });
      await expect(c.health()).rejects.toBeInstanceOf(APIError);
      expect(seen.splice(0)).toEqual([host(base)]);
      await c.health();
      expect(seen.splice(0)).toEqual([skipped ? host(second) : host(base)]);
    } finally {
      await fetch(`${base}/__test/faults/${run}`, { method: "DELETE" });
    }
  });
});

describe("failover: a success in flight", () => {
  it("does not end the skip early (as in Go and Python)", async () => {
    const base = brokerUrl();
    const run = `js-${randomUUID().slice(0, 12)}`;
    const rules = [{ method: "GET", path: "/health", responses: [{ status: 503 }] }];
    const res = await fetch(`${base}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
    expect(res.status, "the test broker serves no fault scripts (LANES_TEST_FAULTS)").toBe(204);
    try {
      const second = sameBrokerOtherHost(base);
      const seen: string[] = [];
      const c = recording([base, second], seen, { headers: { "X-Lanes-Test-Run": run }, retryAttempts: 0 });
      const popped = c.queue(`test-js-skip-outlasts-${randomUUID().slice(0, 8)}`).wait(true).timeoutMillis(1000).pop();
      await sleep(300); // the pop is parked on the first URL
      await expect(c.health()).rejects.toBeInstanceOf(APIError);
      await popped;
      expect(seen.splice(0)).toEqual([host(base), host(base)]);
      await c.health();
      expect(seen.splice(0), "the first URL is still skipped").toEqual([host(second)]);
    } finally {
      await fetch(`${base}/__test/faults/${run}`, { method: "DELETE" });
    }
  });
});

describe("failover: an attempt cut short", () => {
  // The first GET /health of the run answers after 2 s; the cut comes at 200 ms.
  it.each([
    { name: "by the caller's withDeadline marks nothing", o: {}, deadline: true, skipped: false },
    { name: "by the per-attempt timeoutMillis marks the URL", o: { timeoutMillis: 200 }, deadline: false, skipped: true },
  ])("$name (as in Go and Python)", async ({ o, deadline, skipped }) => {
    const base = brokerUrl();
    const run = `js-${randomUUID().slice(0, 12)}`;
    const rules = [{ method: "GET", path: "/health", responses: [{ status: 200, delayMs: 2000, body: { status: "healthy" } }] }];
    const res = await fetch(`${base}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
    expect(res.status, "the test broker serves no fault scripts (LANES_TEST_FAULTS)").toBe(204);
    try {
      const second = sameBrokerOtherHost(base);
      const seen: string[] = [];
      const c = recording([base, second], seen, { headers: { "X-Lanes-Test-Run": run }, retryAttempts: 0, ...o });
      const slow = deadline ? withDeadline(200, () => c.health()) : c.health();
      await expect(slow).rejects.toBeInstanceOf(APITimeoutError);
      expect(seen.splice(0)).toEqual([host(base)]);
      await c.health();
      expect(seen.splice(0)).toEqual([skipped ? host(second) : host(base)]);
    } finally {
      await fetch(`${base}/__test/faults/${run}`, { method: "DELETE" });
    }
  });
});

/** unansweredUrl serves a URL whose connects wait without an answer, as to a host that drops packets: a worker thread listens with a backlog of 1 (Node takes 0 for its default) and then blocks its event loop, so nothing is accepted, and the backlog is filled. `release` ends it all. */
async function unansweredUrl(): Promise<{ url: string; release: () => Promise<void> }> {
  const hold = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(
    `const { parentPort, workerData } = require("node:worker_threads");
    const srv = require("node:net").createServer();
    srv.listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => {
      parentPort.postMessage(srv.address().port);
      Atomics.wait(workerData, 0, 0, 60000);
    });`,
    { eval: true, workerData: hold },
  );
  const port = await new Promise<number>((r) => worker.once("message", r));
  // Linux keeps backlog + 1 connections waiting for accept; these take those places (and more).
  const fill: Socket[] = [];
  for (let i = 0; i < 4; i++) fill.push(connect(port, "127.0.0.1").on("error", () => undefined));
  await sleep(200);
  const release = async () => {
    Atomics.store(hold, 0, 1);
    Atomics.notify(hold, 0);
    for (const s of fill) s.destroy();
    await worker.terminate();
  };
  return { url: `http://127.0.0.1:${port}`, release };
}

describe("failover: a connect that does not answer", () => {
  it("a per-attempt timeout that ends the connect resends a KV incr on the next URL (the request never left; as in Go and Python)", async () => {
    const { url, release } = await unansweredUrl();
    try {
      const ns = `js-${randomUUID().slice(0, 12)}`;
      const c = new Lanes({ urls: [url, brokerUrl()], env: {}, logger: null, timeoutMillis: 500 });
      const started = Date.now();
      const res = await c.kv(ns).incr("hits", 1, { forever: true });
      expect(res.applied).toBe(true);
      expect(Date.now() - started).toBeLessThan(2000);
      const got = await new Lanes({ url: brokerUrl(), env: {}, logger: null }).kv(ns).get("hits");
      expect(got.value).toBe(1);
    } finally {
      await release();
    }
  });
});
