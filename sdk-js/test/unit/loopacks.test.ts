// What a consume loop or iterator makes of one pop: its slices per partition (groupByPartition) and its acks (loopAcks, docs/sdk-design.md "Loop acks").
import { describe, expect, it } from "vitest";
import { loopAcks } from "../../src/consumer.js";
import { groupByPartition, type AckStatus, type Message } from "../../src/message.js";

const msg = (partitionId: string, transactionId: string): Message<unknown> => ({
  id: `id-${transactionId}`,
  transactionId,
  traceId: null,
  data: null,
  producerSub: null,
  createdAt: "2026-01-01T00:00:00Z",
  partitionId,
  partition: partitionId,
  leaseId: "L",
  consumerGroup: "__QUEUE_MODE__",
  queue: "q",
});

type Target = { partitionId: string; transactionId: string; leaseId?: string | null; consumerGroup?: string | null };
const ack = (target: Target, status: AckStatus = "completed") => ({ target, status });
/** sent names what loopAcks keeps: partition/transaction:status. */
const sent = (items: { target: Target; status: AckStatus }[]) => loopAcks(items).map((a) => `${a.target.partitionId}/${a.target.transactionId}:${a.status}`);

describe("groupByPartition", () => {
  it("keeps one partition's messages as they are, in order", () => {
    const ms = [msg("a", "1"), msg("a", "2"), msg("a", "3")];
    expect(groupByPartition(ms)).toEqual([ms]);
    expect(groupByPartition([])).toEqual([]);
  });

  it("splits several partitions' messages, the broker's order inside each and first-seen order across them", () => {
    const [a1, b1, a2, c1, b2] = [msg("a", "1"), msg("b", "1"), msg("a", "2"), msg("c", "1"), msg("b", "2")];
    expect(groupByPartition([a1!, b1!, a2!, c1!, b2!])).toEqual([[a1, a2], [b1, b2], [c1]]);
  });
});

describe("loopAcks", () => {
  it("sends the last completed ack of each (partition, lease, group) before its first nack, and every nack", () => {
    const a = (t: string, status?: AckStatus) => ack({ partitionId: "a", transactionId: t, leaseId: "L" }, status);
    expect(sent([a("1"), a("2"), a("3")])).toEqual(["a/3:completed"]);
    expect(sent([a("1"), a("2"), a("3", "failed"), a("4", "retry")])).toEqual(["a/2:completed", "a/3:failed", "a/4:retry"]);
    expect(sent([a("1", "retry")])).toEqual(["a/1:retry"]);
  });

  it("keeps partitions apart when their acks interleave, and a partition seen again goes on in its own span", () => {
    const at = (p: string, t: string, status?: AckStatus) => ack({ partitionId: p, transactionId: t, leaseId: "L" }, status);
    expect(sent([at("a", "1"), at("a", "2"), at("b", "1"), at("a", "3"), at("b", "2", "failed"), at("b", "3")])).toEqual(["b/1:completed", "a/3:completed", "b/2:failed", "b/3:completed"]);
  });

  it("keeps leases and groups apart within one partition, an absent lease or group being the empty one", () => {
    const items = [
      ack({ partitionId: "a", transactionId: "1", leaseId: "L1" }),
      ack({ partitionId: "a", transactionId: "2", leaseId: "L2" }),
      ack({ partitionId: "a", transactionId: "3", leaseId: "L1" }),
      ack({ partitionId: "a", transactionId: "4", leaseId: "L1", consumerGroup: "g" }),
      ack({ partitionId: "a", transactionId: "5", leaseId: null }),
      ack({ partitionId: "a", transactionId: "6", leaseId: "" }),
    ];
    expect(sent(items)).toEqual(["a/2:completed", "a/3:completed", "a/4:completed", "a/6:completed"]);
  });

  it("sends a partition whose acks repeat a transaction id whole", () => {
    const at = (p: string, t: string) => ack({ partitionId: p, transactionId: t, leaseId: "L" });
    expect(sent([at("a", "1"), at("a", "2"), at("a", "1"), at("b", "1"), at("b", "2")])).toEqual(["a/1:completed", "a/2:completed", "a/1:completed", "b/2:completed"]);
  });
});
