// Integration helpers: the broker comes from LANES_TEST_URL (set by `make test`). Without it
// these tests fail loudly instead of passing.
import { randomUUID } from "node:crypto";
import { expect, type TestContext } from "vitest";
import { Lanes, NotImplementedByBrokerError, type LanesOptions } from "../../src/index.js";

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

/** skipIf501 runs `fn`; a 501 not_implemented from the broker skips the test with a reason (the route is not built yet). */
export async function skipIf501<T>(ctx: TestContext, what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof NotImplementedByBrokerError) {
      ctx.skip(`${what}: broker answers 501 not_implemented (route not built yet)`);
    }
    throw err;
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function expectUuidV7(id: string): void {
  expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
}
