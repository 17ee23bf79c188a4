// Each failure kind is its own class, against a real broker: its own 400 and 404, and the statuses
// and slow answers its test fault scripts send (scripts/test-broker.sh serves them when auth is
// off). The same table runs in sdk-go (errors_integration_test.go) and sdk-python
// (test_error_kinds.py).
import { createServer } from "node:net";
import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import * as lanes from "../../src/index.js";
import { brokerUrl, client, uniq } from "./helpers.js";

const kinds = [
  lanes.BadRequestError, lanes.AuthenticationError, lanes.PermissionDeniedError, lanes.NotFoundError,
  lanes.ConflictError, lanes.PayloadTooLargeError, lanes.RateLimitError, lanes.InternalServerError,
  lanes.NotImplementedByBrokerError, lanes.APITimeoutError, lanes.APIConnectionError,
];
const kindsOf = (err: unknown) => kinds.filter((k) => err instanceof k).map((k) => k.name).sort();

const runs: string[] = [];
afterEach(async () => {
  for (const run of runs.splice(0)) await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "DELETE" });
});

async function scripted(rules: unknown[], o: lanes.LanesOptions = {}): Promise<lanes.Lanes> {
  const run = `js-${randomUUID().slice(0, 12)}`;
  const res = await fetch(`${brokerUrl()}/__test/faults/${run}`, { method: "PUT", body: JSON.stringify({ rules }) });
  expect(res.status, "the test broker serves no fault scripts: start it with scripts/test-broker.sh (LANES_TEST_FAULTS on)").toBe(204);
  runs.push(run);
  return client({ headers: { "X-Lanes-Test-Run": run }, retryAttempts: 0, max429Attempts: 0, ...o });
}

describe("error kinds", () => {
  it("the broker's own 400 and 404", async () => {
    const c = client({ retryAttempts: 0 });
    const q = uniq("kinds");
    const bad = await c.queue(q).push([{ data: 1, transactionId: "x".repeat(1025) }]).catch((e: unknown) => e);
    expect(kindsOf(bad)).toEqual(["BadRequestError"]);
    expect((bad as lanes.APIError).code).toBe("bad_request");
    // The broker's text alone is brokerMessage; message stays self-describing for logs.
    expect((bad as lanes.APIError).brokerMessage).toBe("items[0].transactionId is longer than 1024 bytes");
    expect((bad as lanes.APIError).message).toBe("400 bad_request: items[0].transactionId is longer than 1024 bytes");
    expect(kindsOf(await c.admin.getQueue(`${q}-absent`).catch((e: unknown) => e))).toEqual(["NotFoundError"]);
  });

  it.each([
    [400, {}, "BadRequestError"],
    [401, {}, "AuthenticationError"],
    [403, {}, "PermissionDeniedError"],
    [404, {}, "NotFoundError"],
    [409, {}, "ConflictError"],
    [413, {}, "PayloadTooLargeError"],
    [429, { "Retry-After": "3600" }, "RateLimitError"],
    [500, {}, "InternalServerError"],
    [503, {}, "InternalServerError"],
    [501, {}, "NotImplementedByBrokerError"],
  ])("%i is its own class", async (status, headers, kind) => {
    const c = await scripted([{ method: "POST", path: "/api/v1/push", responses: [{ status, headers }] }]);
    const err = await c.queue("js-kinds").push([1]).catch((e: unknown) => e);
    expect(kindsOf(err)).toEqual([kind]);
    expect((err as lanes.APIError).status).toBe(status);
    // As Go's Terminal() and Python's terminal: every 4xx but 429.
    expect((err as lanes.APIError).terminal).toBe(status >= 400 && status < 500 && status !== 429);
  });

  it("a write that is not idempotent and timed out is an OutcomeUnknownError and still an APITimeoutError", async () => {
    const c = await scripted([{ method: "POST", path: "/api/v1/kv", responses: [{ status: 200, delayMs: 3000 }] }], { timeoutMillis: 200 });
    const err = await c.kv("js-kinds").incr("counter", 1, { forever: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(lanes.OutcomeUnknownError);
    expect(kindsOf(err)).toEqual(["APIConnectionError", "APITimeoutError"]);
  });

  it("a timed-out attempt is an APITimeoutError; a refused connection is not", async () => {
    const slow = { status: 200, delayMs: 3000 };
    const c = await scripted([{ path: "/api/v1/resources/overview", responses: [slow] }], { timeoutMillis: 200 });
    expect(kindsOf(await c.admin.getOverview().catch((e: unknown) => e))).toEqual(["APIConnectionError", "APITimeoutError"]);

    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const { port } = srv.address() as { port: number };
    await new Promise((r) => srv.close(r));
    const dead = new lanes.Lanes({ url: `http://127.0.0.1:${port}`, env: {}, retryAttempts: 0 });
    expect(kindsOf(await dead.admin.getOverview().catch((e: unknown) => e))).toEqual(["APIConnectionError"]);
  });
});
