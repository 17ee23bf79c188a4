// Messages as the SDK hands them out: the wire message plus its queue name.
import type { PopAutopilotEcho, WireMessage } from "./types.js";

/** Message is one leased message. `leaseId`, `partitionId`, `consumerGroup` and `transactionId` are all `ack`, `renew` and `transaction().ack` need. */
export type Message<T = unknown> = Omit<WireMessage, "data"> & {
  /** data is the pushed payload, verbatim. */
  data: T;
  /** queue is the queue the message was popped from ("" on a discovery pop). */
  queue: string;
};

/** PopResult is one pop's messages plus the lease and the autopilot echo. */
export interface PopResult<T = unknown> {
  messages: Message<T>[];
  /** leaseId covers every message ("" for an empty pop or with serverAutoAck). */
  leaseId: string;
  consumerGroup: string;
  partitionsClaimed: number;
  /** leaseSeconds is the length of the pop's lease (its leaseSeconds, else the queue's leaseTime); undefined with serverAutoAck, or from a broker that does not send it. */
  leaseSeconds?: number | undefined;
  /** leaseExpiresAt is when the lease ends (RFC 3339), on the database's clock, which may differ from this machine's: count from leaseSeconds to compare with Date.now(). */
  leaseExpiresAt?: string | undefined;
  /** autopilot is the broker's echo when the pop engaged autopilot. */
  autopilot?: PopAutopilotEcho | undefined;
}

/** AckStatus is what an acknowledgement tells the broker. */
export type AckStatus = "completed" | "failed" | "retry" | "dlq";

/** groupByPartition splits messages by partitionId, keeping the broker's order inside each partition and first-seen order across them. Messages of one partition (most pops) come back as `[messages]`, not copied. */
export function groupByPartition<T>(messages: Message<T>[]): Message<T>[][] {
  const first = messages[0]?.partitionId;
  if (messages.every((msg) => msg.partitionId === first)) return messages.length === 0 ? [] : [messages];
  const m = new Map<string, Message<T>[]>();
  for (const msg of messages) {
    const list = m.get(msg.partitionId);
    if (list) list.push(msg);
    else m.set(msg.partitionId, [msg]);
  }
  return [...m.values()];
}
