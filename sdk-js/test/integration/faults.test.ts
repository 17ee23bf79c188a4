// The consume loop, the messages() iterator and a producer ride through a broker SIGKILL and a PostgreSQL restart. The
// broker and the cluster are the test's own (scripts/fault-broker.sh): the shared test broker
// and `make test`'s cluster serve other tests meanwhile, so they cannot be killed.
import { execFile } from "node:child_process";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { Lanes, LanesError, type Message } from "../../src/index.js";
import { sleep } from "./helpers.js";

const script = fileURLToPath(new URL("../../../scripts/fault-broker.sh", import.meta.url));
const run = promisify(execFile);

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

class FaultBroker {
  constructor(
    readonly url: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  static async create(): Promise<FaultBroker> {
    const [port, pgPort] = [await freePort(), await freePort()];
    return new FaultBroker(`http://127.0.0.1:${port}`, {
      ...process.env,
      LANES_FAULT_DIR: `/tmp/lanes-fault-js-${port}-${process.pid}`,
      LANES_FAULT_PORT: String(port),
      LANES_FAULT_PG_PORT: String(pgPort),
    });
  }

  async run(action: "start" | "kill" | "stop-pg" | "start-pg" | "stop"): Promise<void> {
    await run("bash", [script, action], { env: this.env });
  }
}

/** A consume loop's or iterator's warnings ("consume: <op>: <error>", "messages: <op>: <error>") and when each came. */
class LoopWarnings {
  readonly lines: { at: number; text: string }[] = [];
  constructor(private readonly who: "consume" | "messages") {}
  warn(message: string): void {
    this.lines.push({ at: performance.now(), text: message });
  }
  count(op: string): number {
    return this.lines.filter((l) => l.text.includes(`${this.who}: ${op}:`)).length;
  }
  ackFailedBetween(from: number, to: number): boolean {
    return this.lines.some((l) => l.at >= from && l.at <= to && l.text.includes(`${this.who}: ack:`));
  }
}

/** Each handling of each transaction id, and each partition's first handlings in order. */
class Deliveries {
  readonly handled = new Map<string, number[]>();
  readonly order = new Map<string, string[]>();
  add(m: Message): void {
    if (!this.handled.has(m.transactionId)) {
      this.order.set(m.partitionId, [...(this.order.get(m.partitionId) ?? []), m.transactionId]);
    }
    this.handled.set(m.transactionId, [...(this.handled.get(m.transactionId) ?? []), performance.now()]);
  }
}

/** checkDeliveries checks one reader's handlings against what the producers were told: every stored message handled, once, in push order per partition, and nothing never pushed. */
function checkDeliveries(who: string, got: Deliveries, warnings: LoopWarnings, told: Map<string, string>): void {
  const { handled, order } = got;
  const missing = [...told.keys()].filter((txn) => !handled.has(txn));
  const unknown = [...handled.keys()].filter((txn) => !told.has(txn));
  const unexplained: string[] = [];
  let redelivered = 0;
  for (const [txn, times] of handled) {
    for (let k = 1; k < times.length; k++) {
      redelivered++;
      if (!warnings.ackFailedBetween(times[k - 1]!, times[k]!)) unexplained.push(txn);
    }
  }
  const statuses: Record<string, number> = {};
  for (const s of told.values()) statuses[s] = (statuses[s] ?? 0) + 1;
  console.log(
    `${who}: stored ${told.size} ${JSON.stringify(statuses)}, handled ${handled.size} distinct, ${redelivered} redelivered;`,
    `warnings ${JSON.stringify(warnings.lines.map((l) => l.text))}`,
  );
  expect(missing, `${who}: stored but never handled`).toEqual([]);
  expect(unknown, `${who}: handled but never pushed`).toEqual([]);
  // The producers push one item at a time, so a partition's ids ascend in push order.
  const outOfOrder = [...order.values()].flatMap((txns) => txns.slice(1).flatMap((b, k) => (b < txns[k]! ? [`${txns[k]} before ${b}`] : [])));
  expect(outOfOrder, `${who}: a partition's messages handled out of push order`).toEqual([]);
  expect(unexplained, `${who}: handled again though no ack failure was reported in between`).toEqual([]);
  // A failed ack is resent until it lands (the broker is back well inside the 10 s
  // lease), so no message is handled twice; before, each failed ack gave its pop back.
  expect(redelivered, `${who}: handled twice: a failed ack was not resent until it landed`).toBe(0);
}

async function waitUntil(done: () => boolean, what: string, timeoutMillis = 15_000): Promise<void> {
  for (const deadline = performance.now() + timeoutMillis; !done(); await sleep(20)) {
    if (performance.now() > deadline) throw new Error(`waited ${timeoutMillis} ms for ${what}`);
  }
}

describe("faults", () => {
  let broker: FaultBroker | undefined;
  afterEach(async () => {
    await broker?.run("stop");
  });

  it("the consume loop, the iterator and a producer ride through a broker SIGKILL and a PostgreSQL restart", async () => {
    broker = await FaultBroker.create();
    const fb = broker;
    await fb.run("start");
    const queue = "sdkfaults-js";
    const [plainN, bufferedN, partitions] = [300, 150, 4];
    const warnings = new LoopWarnings("consume");
    const producer = new Lanes({ url: fb.url, env: {} });
    const consumerClient = new Lanes({ url: fb.url, env: {}, logger: warnings });

    const got = new Deliveries();
    const consumer = consumerClient
      .queue(queue)
      .concurrency(2)
      .leaseSeconds(10)
      .consume(async (m: Message) => {
        got.add(m);
        await sleep(5); // some work, so a backlog builds and pops carry batches
      });
    // The iterator reads the same messages through a group of its own, on a client of its own
    // so its warnings are told apart from the loop's.
    const iterWarnings = new LoopWarnings("messages");
    const iterClient = new Lanes({ url: fb.url, env: {}, logger: iterWarnings });
    const iterView = iterClient.queue(queue).group("iter").subscriptionMode("all");
    const iterGot = new Deliveries();
    const iterStop = new AbortController();
    let iterEnd: string | undefined; // how the iterator ended, once it has
    const iterating = (async () => {
      for await (const m of iterView.leaseSeconds(10).messages({ signal: iterStop.signal })) {
        iterGot.add(m);
        await sleep(5);
      }
    })().then(
      () => (iterEnd = "returned"),
      (e: unknown) => (iterEnd = `threw ${String(e)}`),
    );
    // Passed or failed, nothing of the test outlives it.
    let finished = false;
    onTestFinished(async () => {
      finished = true;
      iterStop.abort();
      await Promise.allSettled([consumer.stopAndCancel(), producer.close({ timeoutMillis: 1000 }), iterating]);
    });

    const told = new Map<string, string>();
    const pushErrors: string[] = [];
    const bufferErrors: unknown[] = [];
    let bufferDropped = 0;
    let pushedCount = 0;
    // The buffered producer goes at the plain one's pace, an item per push call (answered or
    // failed): on a slow machine it would otherwise be done before the broker goes down, and no
    // buffer flush would fail.
    let bufferTurns = 0;
    // An application resends an item the SDK did not report stored, with the same id.
    const pushPlain = async () => {
      for (let i = 0; i < plainN && !finished; i++) {
        const txn = `js-${String(i).padStart(3, "0")}`;
        const q = producer.queue(queue).partition(`p${i % partitions}`);
        while (!finished) {
          bufferTurns++;
          try {
            const [res] = await q.push([{ transactionId: txn, data: { i } }]);
            if (res && res.status !== "failed") {
              told.set(txn, res.status);
              break;
            }
            pushErrors.push(JSON.stringify(res));
          } catch (e) {
            if (!(e instanceof LanesError)) throw e;
            pushErrors.push(String(e));
          }
          await sleep(50);
        }
        pushedCount++;
        await sleep(5);
      }
    };
    const buf = producer
      .queue(queue)
      .partition("buffered")
      .buffer({ messageCount: 10, timeMillis: 20, onError: (e, dropped) => {
          bufferErrors.push(e);
          bufferDropped += dropped.length;
        },
      });
    const pushBuffered = async () => {
      for (let i = 0; i < bufferedN && !finished; i++) {
        while (bufferTurns === 0 && !finished) await sleep(5);
        if (finished) return;
        bufferTurns--;
        await buf.push([{ transactionId: `js-buf-${String(i).padStart(3, "0")}`, data: { i } }]);
        await sleep(10);
      }
    };
    const waitPushed = async (n: number) => {
      while (pushedCount < n) await sleep(5);
    };

    const producers = Promise.all([pushPlain(), pushBuffered()]);
    await waitPushed(plainN / 3);
    await fb.run("kill");
    await sleep(1000);
    // Down until both loops met the outage past the SDK's own retries, so their recovery runs: a
    // worker resending a failed ack pops nothing meanwhile, so its failed ack counts as a pop's.
    await waitUntil(
      () =>
        warnings.count("pop") + warnings.count("ack") > 0 &&
        iterWarnings.count("pop") + iterWarnings.count("ack") > 0 &&
        pushErrors.length > 0 &&
        bufferErrors.length > 0,
      "a failed pop or ack (loop and iterator), push and buffer flush reported while the broker is down",
    );
    await fb.run("start");
    await waitPushed((2 * plainN) / 3);
    const buffered = [...told.values()].filter((s) => s === "buffered").length;
    await fb.run("stop-pg");
    await waitUntil(() => [...told.values()].filter((s) => s === "buffered").length > buffered, "a push answered buffered while PostgreSQL is down");
    await fb.run("start-pg");
    await producers;
    // The buffer holds what it could not send yet; close sends it (or rejects with UnsentError).
    await producer.close({ timeoutMillis: 20_000 });
    for (let i = 0; i < bufferedN; i++) told.set(`js-buf-${String(i).padStart(3, "0")}`, "in the push buffer");
    expect(told.size).toBe(plainN + bufferedN);

    // Done when every stored message was handled and the broker holds nothing uncommitted: a
    // message whose ack failed has then come back after its lease and been acked.
    const settled = async (got: Deliveries, view: ReturnType<Lanes["queue"]>) => {
      if ([...told.keys()].some((txn) => !got.handled.has(txn))) return false;
      try {
        return (await view.depth()).pending === 0;
      } catch {
        return false;
      }
    };
    const bothSettled = async () => (await settled(got, consumerClient.queue(queue))) && (await settled(iterGot, iterView));
    for (const deadline = performance.now() + 25_000; performance.now() < deadline && !consumer.done && iterEnd === undefined && !(await bothSettled()); ) await sleep(50);
    expect(consumer.done, `the consume loop ended on its own: ${String(consumer.error)}`).toBe(false);
    expect(iterEnd, "the iterator ended on its own").toBeUndefined();
    await consumer.stop({ timeoutMillis: 10_000 });
    expect(consumer.error).toBeUndefined();
    iterStop.abort();
    await iterating;
    expect(iterEnd, "the iterator's end on its signal").toBe("returned");

    console.log(`push errors ${JSON.stringify(pushErrors)}; buffer errors ${bufferErrors.map(String).join(", ")}`);
    checkDeliveries("consume loop", got, warnings, told);
    checkDeliveries("iterator", iterGot, iterWarnings, told);
    expect(bufferDropped, "items the push buffer dropped").toBe(0);
  }, 60_000);
});
