// Bearer tokens against a real broker with JWT auth on (LANES_TEST_AUTH_URL, started by `make test`
// with the HS256 secret LANES_TEST_JWT_SECRET): the token is sent, a refused one rejects with a typed
// error after one request, and a consumer the broker refuses ends instead of polling on.
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { AuthenticationError, Lanes, PermissionDeniedError } from "../../src/index.js";
import { uniq } from "./helpers.js";

const url = process.env.LANES_TEST_AUTH_URL;
const secret = process.env.LANES_TEST_JWT_SECRET;

/** hs256 mints a token for role (subject sub), valid for an hour. */
function hs256(key: string, role: string, sub = `sdk-js-${role}`): string {
  const enc = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const signing = `${enc({ alg: "HS256", typ: "JWT" })}.${enc({ sub, role, iat: now, exp: now + 3600 })}`;
  return `${signing}.${createHmac("sha256", key).update(signing).digest("base64url")}`;
}

/** counted is a client whose requests are counted. */
function counted(token?: string | (() => string | Promise<string>)): { lanes: Lanes; requests: () => number } {
  let n = 0;
  const lanes = new Lanes({
    url: url!,
    env: {},
    retryDelayMillis: 50,
    ...(token === undefined ? {} : { bearerToken: token }),
    fetch: (input, init) => {
      n++;
      return fetch(input, init);
    },
  });
  return { lanes, requests: () => n };
}

describe.skipIf(!url || !secret)("bearer tokens (broker with auth on)", () => {
  it("sends the token; a 401 or 403 rejects typed after one request", async () => {
    const q = uniq("auth");
    const rw = counted(hs256(secret!, "read-write"));
    expect((await rw.lanes.queue(q).push([{ n: 1 }]))[0]!.status).toBe("queued");

    for (const token of [undefined, hs256("not-the-secret-not-the-secret-0123", "admin")]) {
      const c = counted(token);
      const err = await c.lanes.queue(q).push([{ n: 2 }]).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AuthenticationError);
      expect((err as AuthenticationError).code).toBe("unauthorized");
      expect(c.requests()).toBe(1);
    }

    const ro = counted(hs256(secret!, "read-only"));
    const err = await ro.lanes.queue(q).push([{ n: 3 }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PermissionDeniedError);
    expect((err as PermissionDeniedError).code).toBe("forbidden");
    expect(ro.requests()).toBe(1);
    await Promise.all([rw, ro].map((c) => c.lanes.close()));
  });

  it("a bearerToken function is asked before every call; if it throws, the call fails with its error and sends nothing", async () => {
    const q = uniq("auth-func");
    let asked = 0;
    const c = counted(async () => {
      asked++;
      if (asked === 3) throw new Error("identity provider unreachable");
      return hs256(secret!, "read-write", `rotated-${asked}`);
    });
    await c.lanes.queue(q).push([{ n: 1 }]);
    await c.lanes.queue(q).push([{ n: 2 }]);
    await expect(c.lanes.queue(q).push([{ n: 3 }])).rejects.toThrow("identity provider unreachable");
    expect(c.requests()).toBe(2);
    const popped = await c.lanes.queue(q).autopilot(false).batch(10).wait(false).pop();
    expect(popped.map((m) => m.producerSub)).toEqual(["rotated-1", "rotated-2"]);
    await c.lanes.close();
  });

  it("a consumer whose token the broker refuses ends with the typed error", async () => {
    const q = uniq("auth-consume");
    for (const [token, kind] of [
      [undefined, AuthenticationError],
      [hs256(secret!, "read-only"), PermissionDeniedError],
    ] as const) {
      const c = counted(token);
      const consumer = c.lanes.queue(q).consume(() => {});
      await expect(consumer.closed).rejects.toBeInstanceOf(kind);
      expect(c.requests()).toBeLessThanOrEqual(2);
      await c.lanes.close();
    }
  });
});
