// Broker URLs the client refuses when it is built, rather than failing every call later.
import { describe, expect, it } from "vitest";
import { Lanes, LanesError } from "../../src/index.js";

describe("broker URLs", () => {
  it.each(["ftp://127.0.0.1:6632", "localhost:6632", "http://"])("%s is not an http(s) URL", (url) => {
    expect(() => new Lanes({ url, env: {} })).toThrow(LanesError);
  });

  // Node's fetch refuses these ports before connecting ("bad port"): a write there would end as
  // an unknown outcome although nothing was sent.
  it.each(["http://127.0.0.1:1", "http://broker:6000", "https://broker:6667/", "http://[::1]:10080"])(
    "%s is on a port fetch blocks",
    (url) => {
      expect(() => new Lanes({ url, env: {} })).toThrow(/which Node's fetch refuses to connect to/);
      expect(() => new Lanes({ urls: ["http://127.0.0.1:6632", url], env: {} })).toThrow(LanesError);
    },
  );

  it("a fetch of the caller's own may use any port", () => {
    expect(() => new Lanes({ url: "http://127.0.0.1:1", env: {}, fetch: (input, init) => fetch(input, init) })).not.toThrow();
  });

  it.each(["http://127.0.0.1:2", "http://localhost:6632", "https://broker.example", "http://[::1]:6632"])("%s is accepted", (url) => {
    expect(() => new Lanes({ url, env: {} })).not.toThrow();
  });
});

describe("default broker URL", () => {
  it("is LANES_URL, else http://localhost:6632 (as Go and Python)", async () => {
    const asked: string[] = [];
    const fetch = (async (input: string | URL | Request) => {
      asked.push(String(input instanceof Request ? input.url : input));
      return new Response(JSON.stringify({ status: "healthy" }), { status: 200, headers: { "content-type": "application/json" } });
    }) as typeof globalThis.fetch;
    await new Lanes({ env: { LANES_URL: "http://broker-from-env:7000" }, fetch, logger: null }).health();
    await new Lanes({ env: {}, fetch, logger: null }).health();
    expect(asked.map((u) => new URL(u).origin)).toEqual(["http://broker-from-env:7000", "http://localhost:6632"]);
  });
});
