// Type-level checks of the public surface (enforced by `npm run typecheck`, which covers test/).
import { describe, expectTypeOf, it } from "vitest";
import type { PushResult, PushStatus, WirePushResult } from "../../src/index.js";

describe("public type names", () => {
  it("PushResult is the camelCase result push() returns; WirePushResult is the wire shape", () => {
    expectTypeOf<PushResult>().toHaveProperty("messageId");
    expectTypeOf<PushResult>().not.toHaveProperty("message_id");
    expectTypeOf<WirePushResult>().toHaveProperty("message_id");
    expectTypeOf<WirePushResult>().toHaveProperty("queueName");
    expectTypeOf<WirePushResult["status"]>().toEqualTypeOf<PushStatus>();
  });
});
