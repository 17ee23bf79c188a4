/* global performance, URL, Buffer */
// The TypeScript SDK's own CPU per message of a consume loop and per request of a one-message
// push, against a real broker (LANES_URL), for a build of the SDK (--sdk <dir with dist/>, default
// this one; run `npm run build` first), in rounds. With --stub the broker is a stub in a child
// process instead (every pop answers 100 messages of one partition at once, every ack and push
// succeeds): no broker or PostgreSQL shares the machine's cores, so builds compare with less noise.
// Usage:
//   node bench/client_cpu.mjs [--sdk ../other/sdk-js] [--rounds 3] [--messages 100000] [--pushes 20000] [--stub]
import { fork } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const { values: opts } = parseArgs({
  options: {
    sdk: { type: "string", default: new URL("..", import.meta.url).pathname },
    rounds: { type: "string", default: "3" },
    messages: { type: "string", default: "100000" },
    pushes: { type: "string", default: "20000" },
    stub: { type: "boolean", default: false },
    "serve-stub": { type: "boolean", default: false },
  },
});
const partitions = 16;
const perPartition = Math.ceil(Number(opts.messages) / partitions);
const total = partitions * perPartition;
const body = "x".repeat(72);

/** serveStub answers as the stub broker on a free port and sends the port to the parent. */
function serveStub() {
  let seq = 0;
  const answer = (req) => {
    if (req.url.startsWith("/api/v1/pop/")) {
      const lease = randomUUID();
      const part = `p${seq % partitions}`;
      const pid = `01a25142-be4c-73d4-a42a-e4e004f470${String(seq % partitions).padStart(2, "0")}`;
      const msgs = [];
      for (let i = 0; i < 100; i++, seq++) {
        msgs.push(`{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-12-07T16:07:38.31835Z","data":{"seq":${seq},"body":"${body}"},"id":"01a25142-be4a-7e41-89f1-${String(seq).padStart(12, "0")}","leaseId":"${lease}","partition":"${part}","partitionId":"${pid}","producerSub":null,"traceId":null,"transactionId":"${part}-${seq}"}`);
      }
      return `{"consumerGroup":"__QUEUE_MODE__","leaseExpiresAt":"2026-12-07T16:08:38.33035Z","leaseId":"${lease}","leaseSeconds":60,"messages":[${msgs.join(",")}],"partition":"${part}","partitionId":"${pid}","partitionsClaimed":1,"queue":"q","success":true}`;
    }
    if (req.url.startsWith("/api/v1/ack")) return `[{"index":0,"success":true,"transactionId":"t"}]`;
    if (req.url.startsWith("/api/v1/push")) return `[{"index":0,"message_id":"01a25142-be4a-7e41-89f1-aae85f079e66","queueName":"q","status":"queued","transaction_id":"t"}]`;
    if (req.url.includes("/extend")) return `{"success":true,"renewed":1,"newExpiresAt":"2026-12-07T16:08:38.33035Z"}`;
    return "{}";
  };
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const out = answer(req);
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(out) });
      res.end(out);
    });
  });
  server.listen(0, "127.0.0.1", () => process.send(server.address().port));
  process.on("disconnect", () => process.exit(0));
}

/** cpuMicros is the process's CPU time since `from`, in µs. */
const cpuMicros = (from) => {
  const u = process.cpuUsage(from);
  return u.user + u.system;
};

/** consumeRound fills a fresh queue (the stub needs none), then drains it with 8 consumers in queue mode (batch 100) and a handler that does nothing. */
async function consumeRound(lanes, round) {
  const q = `client-cpu-${process.pid}-${round}-${Date.now()}`;
  for (let p = 0; p < partitions && !opts.stub; p++) {
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

if (opts["serve-stub"]) {
  serveStub();
} else {
  let stub;
  let url = process.env.LANES_URL ?? "http://127.0.0.1:6632";
  if (opts.stub) {
    stub = fork(fileURLToPath(import.meta.url), ["--serve-stub"]);
    url = `http://127.0.0.1:${await new Promise((r) => stub.once("message", r))}`;
  }
  const { Lanes } = await import(pathToFileURL(resolve(opts.sdk, "dist/index.js")).href);
  const lanes = new Lanes({ url, logger: null });
  try {
    for (let round = 1; round <= Number(opts.rounds); round++) {
      console.log(`round ${round} (${opts.sdk}${opts.stub ? ", stub broker" : ""}): ${await consumeRound(lanes, round)}; ${await pushRound(lanes, round)}`);
    }
  } finally {
    await lanes.close();
    stub?.disconnect();
  }
}
