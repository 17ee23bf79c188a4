// Several broker URLs against a real broker (docs/retries.md §4): a URL whose connection is
// refused is skipped for healthRetryAfterMillis, then asked again (the same cases as sdk-go and
// sdk-python).
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { Lanes, type LanesOptions } from "../../src/index.js";
import { brokerUrl, sleep } from "./helpers.js";

/** closedPortUrl is a local URL nobody listens on: connecting to it is refused. */
async function closedPortUrl(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const addr = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  if (addr === null || typeof addr === "string") throw new Error("no port");
  return `http://127.0.0.1:${addr.port}`;
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
    expect(() => new Lanes({ urls: ["http://127.0.0.1:1"], env: {}, healthRetryAfterMillis: -1 })).toThrow(/healthRetryAfterMillis must be a non-negative number/);
  });

});
