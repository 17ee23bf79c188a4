/* global performance, URL */
// The TypeScript SDK's own CPU per message of a consume loop and per request of a one-message
// push, against a real broker (LANES_URL), for a build of the SDK (--sdk <dir with dist/>, default
// this one; run `npm run build` first), in rounds. Usage:
//   node bench/client_cpu.mjs [--sdk ../other/sdk-js] [--rounds 3] [--messages 100000] [--pushes 20000]
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const { values: opts } = parseArgs({
  options: {
    sdk: { type: "string", default: new URL("..", import.meta.url).pathname },
    rounds: { type: "string", default: "3" },
    messages: { type: "string", default: "100000" },
    pushes: { type: "string", default: "20000" },
  },
});
const url = process.env.LANES_URL ?? "http://127.0.0.1:6632";
const { Lanes } = await import(pathToFileURL(resolve(opts.sdk, "dist/index.js")).href);
const partitions = 16;
const perPartition = Math.ceil(Number(opts.messages) / partitions);
const total = partitions * perPartition;
const body = "x".repeat(72);

/** cpuMicros is the process's CPU time since `from`, in µs. */
const cpuMicros = (from) => {
  const u = process.cpuUsage(from);
  return u.user + u.system;
};

/** consumeRound fills a fresh queue, then drains it with 8 consumers in queue mode (batch 100) and a handler that does nothing. */
async function consumeRound(lanes, round) {
  const q = `client-cpu-${process.pid}-${round}-${Date.now()}`;
  for (let p = 0; p < partitions; p++) {
    for (let off = 0; off < perPartition; off += 1000) {
      const items = [];
      for (let k = off; k < Math.min(off + 1000, perPartition); k++) items.push({ data: { seq: k, body }, transactionId: `p${p}-${k}` });
      await lanes.queue(q).partition(`p${p}`).push(items);
    }
  }
  let handled = 0;
  let allHandled;
  const done = new Promise((r) => (allHandled = r));
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const consumers = Array.from({ length: 8 }, () =>
    lanes
      .queue(q)
      .batch(100)
      .partitions(1)
      .consume(async () => {
        if (++handled === total) allHandled();
      }),
  );
  await done;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuMicros(cpu0);
  await Promise.all(consumers.map((c) => c.stop()));
  return `consume: ${total} messages, ${Math.round(total / seconds)} msg/s, ${(cpu / total).toFixed(1)} µs of CPU a message`;
}

/** pushRound pushes one message a request from 8 producers, each to its own partition. */
async function pushRound(lanes, round) {
  const q = `client-cpu-push-${process.pid}-${round}-${Date.now()}`;
  const n = Number(opts.pushes);
  let next = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      while (next < n) {
        const i = next++;
        await lanes.queue(q).partition(`p${w}`).push([{ data: { i }, transactionId: `t${i}` }]);
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  return `push: ${n} requests, ${Math.round(n / seconds)} req/s, ${(cpuMicros(cpu0) / n).toFixed(0)} µs of CPU a request`;
}

const lanes = new Lanes({ url, logger: null });
try {
  for (let round = 1; round <= Number(opts.rounds); round++) {
    console.log(`round ${round} (${opts.sdk}): ${await consumeRound(lanes, round)}; ${await pushRound(lanes, round)}`);
  }
} finally {
  await lanes.close();
}
