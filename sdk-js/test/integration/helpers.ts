// Integration helpers: the broker comes from LANES_TEST_URL (set by `make test`). Without it
// these tests fail loudly instead of passing.
import { randomUUID } from "node:crypto";
import { createServer } from "node:net";
import { expect } from "vitest";
import { Lanes, type LanesOptions } from "../../src/index.js";

export function brokerUrl(): string {
  const url = process.env.LANES_TEST_URL;
  if (!url) throw new Error("LANES_TEST_URL is not set: run `make test`, or start a broker and export LANES_TEST_URL (see sdk-js/README.md)");
  return url;
}

export function client(o: LanesOptions = {}): Lanes {
  return new Lanes({ url: brokerUrl(), env: {}, retryDelayMillis: 50, ...o });
}

/** uniq returns a queue name no other test uses. */
export function uniq(prefix: string): string {
  return `test-js-${prefix}-${randomUUID().slice(0, 8)}`;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function expectUuidV7(id: string): void {
  expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
}

/** closedPortUrl is a local URL nobody listens on: connecting to it is refused. */
export async function closedPortUrl(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const addr = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  if (addr === null || typeof addr === "string") throw new Error("no port");
  return `http://127.0.0.1:${addr.port}`;
}
