// docs/consuming.md §2: the pop query, byte for byte.
import { describe, expect, it } from "vitest";
import { Lanes, autopilotFromEnv, type QueueBuilder } from "../../src/index.js";

type B = (q: QueueBuilder) => QueueBuilder;
const lanes = new Lanes({ url: "http://127.0.0.1:2", env: {} });
const off = new Lanes({ url: "http://127.0.0.1:2", env: { LANES_SDK_POP_AUTOPILOT: " Off " } });

function query(client: Lanes, b: B, queue?: string) {
  const t = b(client.queue(queue)).popTarget();
  return { path: t.path, query: popQueryOf(client, b, queue) };
}
// popTarget + popQuery through the public helper, the same path popResult takes.
import { popQuery } from "../../src/index.js";
function popQueryOf(client: Lanes, b: B, queue: string | undefined) {
  return popQuery(b(client.queue(queue)).popTarget().knobs, client.popAutopilot);
}

describe("pop query assembly", () => {
  it.each<[string, Lanes, B, string]>([
    ["defaults", lanes, (q) => q, "autopilot=true&wait=true&timeout=30000"],
    ["group", lanes, (q) => q.group("billing"), "autopilot=true&wait=true&timeout=30000&consumerGroup=billing"],
    ["batch 10", lanes, (q) => q.batch(10), "autopilot=true&batch=10&wait=true&timeout=30000"],
    ["partitions 1", lanes, (q) => q.partitions(1), "autopilot=true&wait=true&timeout=30000&partitions=1"],
    ["both knobs", lanes, (q) => q.batch(10).partitions(4), "batch=10&wait=true&timeout=30000&partitions=4"],
    ["autopilot(false)", lanes, (q) => q.autopilot(false), "batch=1&wait=true&timeout=30000"],
    ["off with knobs", lanes, (q) => q.autopilot(false).batch(5).partitions(3), "batch=5&wait=true&timeout=30000&partitions=3"],
    ["off, partitions 1 not sent", lanes, (q) => q.autopilot(false).partitions(1), "batch=1&wait=true&timeout=30000"],
    ["env off, defaults", off, (q) => q, "batch=1&wait=true&timeout=30000"],
    ["env off, autopilot(true)", off, (q) => q.autopilot(true), "autopilot=true&wait=true&timeout=30000"],
    ["wait false, group, mode", lanes, (q) => q.wait(false).group("g").subscriptionMode("all"), "autopilot=true&wait=false&timeout=30000&consumerGroup=g&subscriptionMode=all"],
    ["batch(0) is unset", lanes, (q) => q.batch(0), "autopilot=true&wait=true&timeout=30000"],
    [
      "trailing knobs in order",
      lanes,
      (q) => q.leaseSeconds(5).subscriptionFrom("now").subscriptionMode("new").serverAutoAck(true).timeoutMillis(1500).group("a b"),
      "autopilot=true&wait=true&timeout=1500&consumerGroup=a+b&leaseSeconds=5&subscriptionMode=new&subscriptionFrom=now&autoAck=true",
    ],
  ])("%s", (_name, client, b, want) => {
    expect(popQueryOf(client, b, "orders")).toBe(want);
    expect(query(client, b, "orders").path).toBe("/api/v1/pop/queue/orders");
  });

  it("partition route: only batch applies, partitions never sent", () => {
    expect(query(lanes, (q) => q.partition("p 1"), "orders").path).toBe("/api/v1/pop/queue/orders/partition/p%201");
    expect(popQueryOf(lanes, (q) => q.partition("p").partitions(4), "orders")).toBe("autopilot=true&wait=true&timeout=30000");
    expect(popQueryOf(lanes, (q) => q.partition("p").batch(7).partitions(4), "orders")).toBe("batch=7&wait=true&timeout=30000");
    expect(popQueryOf(lanes, (q) => q.partition("p").autopilot(false).partitions(4), "orders")).toBe("batch=1&wait=true&timeout=30000");
  });

  it("discovery appends namespace and task", () => {
    const b: B = (q) => q.namespace("billing").task("invoices").group("g");
    expect(query(lanes, b, undefined).path).toBe("/api/v1/pop");
    expect(popQueryOf(lanes, b, undefined)).toBe("autopilot=true&wait=true&timeout=30000&consumerGroup=g&namespace=billing&task=invoices");
  });

  it.each(["off", "OFF", " false ", "0", "no", "Disabled"])("env %j switches autopilot off", (v) => {
    expect(autopilotFromEnv({ LANES_SDK_POP_AUTOPILOT: v })).toBe(false);
  });
  it.each([undefined, "on", "true", "", "1"])("env %j leaves it on", (v) => {
    expect(autopilotFromEnv(v === undefined ? {} : { LANES_SDK_POP_AUTOPILOT: v })).toBe(true);
  });
  it("env is read once, at construction", () => {
    const env: NodeJS.ProcessEnv = { LANES_SDK_POP_AUTOPILOT: "off" };
    const c = new Lanes({ url: "http://127.0.0.1:2", env });
    env.LANES_SDK_POP_AUTOPILOT = "on";
    expect(c.popAutopilot).toBe(false);
    expect(new Lanes({ url: "http://127.0.0.1:2", env: {}, popAutopilot: false }).popAutopilot).toBe(false);
  });
  it.each<[string, B, number, string]>([
    ["defaults: batch sent with autopilot", (q) => q, 3, "autopilot=true&batch=3&wait=true&timeout=30000"],
    ["a larger batch is cut", (q) => q.batch(10), 3, "autopilot=true&batch=3&wait=true&timeout=30000"],
    ["a smaller batch stays", (q) => q.batch(2), 3, "autopilot=true&batch=2&wait=true&timeout=30000"],
    ["autopilot off: 1 stays 1", (q) => q.autopilot(false), 3, "batch=1&wait=true&timeout=30000"],
    ["both knobs", (q) => q.batch(10).partitions(4), 3, "batch=3&wait=true&timeout=30000&partitions=4"],
    ["defaults under a large cap: the automatic batch", (q) => q, 500, "autopilot=true&batch=100&wait=true&timeout=30000"],
    ["defaults above the broker's bound: the automatic batch", (q) => q, 20_000, "autopilot=true&batch=100&wait=true&timeout=30000"],
    ["autopilot off under a large cap: 1 stays 1", (q) => q.autopilot(false), 500, "batch=1&wait=true&timeout=30000"],
    ["an explicit batch under a large cap stays", (q) => q.batch(250), 500, "autopilot=true&batch=250&wait=true&timeout=30000"],
  ])("maxBatch caps the batch: %s", (_name, b, maxBatch, want) => {
    expect(popQuery({ ...b(lanes.queue("orders")).popTarget().knobs, maxBatch }, true)).toBe(want);
  });
  it("builders are immutable", () => {
    const base = lanes.queue("orders");
    base.batch(5).group("x");
    expect(popQueryOf(lanes, () => base, "orders")).toBe("autopilot=true&wait=true&timeout=30000");
  });
});
