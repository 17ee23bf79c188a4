// A reported handler failure names the message(s) it was about; the failed ack keeps the handler's own text.
import { describe, expect, it } from "vitest";
import { HandlerError, LanesError } from "../../src/index.js";
import { client, uniq } from "./helpers.js";

class NegativeAmount extends Error {}

describe("HandlerError", () => {
  it("onError receives a HandlerError naming the message, with the handler's error as cause; the dead letter keeps the handler's text", async () => {
    const lanes = client();
    const q = uniq("handlererr");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    await lanes.queue(q).partition("acct-7").push([{ transactionId: "pay-7", data: { amount: -5 } }]);
    const errors: unknown[] = [];
    await lanes
      .queue(q)
      .wait(false)
      .limit(1)
      .reportHandlerErrors(true)
      .onError((e) => errors.push(e))
      .consume(() => {
        throw new NegativeAmount("negative amount");
      });
    expect(errors).toHaveLength(1);
    const err = errors[0] as HandlerError;
    expect(err).toBeInstanceOf(HandlerError);
    expect(err).toBeInstanceOf(LanesError);
    expect(err.name).toBe("HandlerError");
    expect(err.cause).toBeInstanceOf(NegativeAmount);
    expect(err.messages.map((m) => [m.transactionId, m.partition, m.queue])).toEqual([["pay-7", "acct-7", q]]);
    expect(err.messages[0]!.partitionId).not.toBe("");
    expect(err.message).toBe(`handler failed on transaction pay-7 (queue "${q}", partition "acct-7"): negative amount`);
    expect(err.message).not.toContain("amount\":");
    const page = await lanes.queue(q).dlq().limit(10).get();
    expect(page.messages.map((d) => d.errorMessage)).toEqual(["negative amount"]);
  });

  it("a batch handler's HandlerError carries its slice and names at most five transaction ids", async () => {
    const lanes = client();
    const q = uniq("handlererrbatch");
    await lanes.admin.configureQueue(q, { retryLimit: 0 });
    const ids = Array.from({ length: 7 }, (_, i) => `bulk-${i}`);
    await lanes.queue(q).partition("acct-9").push(ids.map((transactionId, i) => ({ transactionId, data: i })));
    const errors: unknown[] = [];
    await lanes
      .queue(q)
      .wait(false)
      .batch(10)
      .limit(7)
      .reportHandlerErrors(true)
      .onError((e) => errors.push(e))
      .consumeBatch(() => {
        throw "ledger closed"; // not an Error: passed on as cause all the same
      });
    expect(errors).toHaveLength(1);
    const err = errors[0] as HandlerError;
    expect(err).toBeInstanceOf(HandlerError);
    expect(err.cause).toBe("ledger closed");
    expect(err.messages.map((m) => m.transactionId)).toEqual(ids);
    expect(err.message).toBe(`handler failed on 7 messages, transactions bulk-0, bulk-1, bulk-2, bulk-3, bulk-4 and 2 more (queue "${q}", partition "acct-9"): ledger closed`);
    const page = await lanes.queue(q).dlq().limit(10).get();
    expect(page.messages.map((d) => d.errorMessage)).toEqual(["ledger closed"]);
  });
});
