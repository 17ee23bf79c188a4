// A soft stop gives back what the stopped pop was already answered: the consumer's and the
// iterator's pops are half-closed at the stop, so an answer the broker had written still arrives
// whole and is released with `retry` (docs/consuming.md §5), instead of staying leased.
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { brokerUrl, client, sleep, uniq } from "./helpers.js";

/** SlowAnswerProxy is a TCP proxy to the broker that passes each answer's bytes on `delayMs` after the broker wrote them (so an answer the broker sent is still on the way when the client acts), and passes a client's half-close on to the broker at once. */
class SlowAnswerProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly broker: URL,
    private readonly delayMs: number,
  ) {
    this.server = createServer({ allowHalfOpen: true }, (client) => this.pipe(client));
  }

  static async start(broker: string, delayMs: number): Promise<SlowAnswerProxy> {
    const proxy = new SlowAnswerProxy(new URL(broker), delayMs);
    await new Promise<void>((r) => proxy.server.listen(0, "127.0.0.1", r));
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }

  private pipe(client: Socket): void {
    const broker = connect({ host: this.broker.hostname, port: Number(this.broker.port), allowHalfOpen: true });
    for (const s of [client, broker]) {
      this.sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => this.sockets.delete(s));
    }
    client.on("data", (chunk) => broker.write(chunk));
    client.on("end", () => broker.end());
    broker.on("data", (chunk) => setTimeout(() => client.write(chunk), this.delayMs));
    broker.on("end", () => setTimeout(() => client.end(), this.delayMs));
  }
}

let proxy: SlowAnswerProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
});

/** leftAtOnce is what a fresh pop (another client) gets within `withinMillis`: a message still leased by the stopped pop is not among it. */
async function leftAtOnce(q: string, withinMillis: number): Promise<unknown[]> {
  const got = await client().queue(q).leaseSeconds(60).timeoutMillis(withinMillis).pop();
  return got.map((m) => m.data);
}

describe("a soft stop while the pop's answer is on the way", () => {
  it("the consumer reads the answer the broker wrote and releases it with retry: a fresh pop gets it at once, not after the 60 s lease", async () => {
    proxy = await SlowAnswerProxy.start(brokerUrl(), 600);
    const q = uniq("softstop-answered");
    const handled: unknown[] = [];
    const c = client({ url: proxy.url })
      .queue(q)
      .leaseSeconds(60)
      .timeoutMillis(20_000)
      .consume((m) => void handled.push(m.data));
    await sleep(1000); // the long poll is parked on the broker
    await client().queue(q).push([{ data: "late" }]);
    await sleep(150); // the broker wrote its answer; the proxy holds it
    await c.stop({ timeoutMillis: 5000 });
    expect(await leftAtOnce(q, 2000)).toEqual(["late"]);
    expect(handled).toEqual([]);
  });

  it("a hard stop (stopAndCancel) does the same: the pop holds no handler's work, and its half-close ends it as soon as an abort would", async () => {
    proxy = await SlowAnswerProxy.start(brokerUrl(), 600);
    const q = uniq("hardstop-answered");
    const handled: unknown[] = [];
    const c = client({ url: proxy.url })
      .queue(q)
      .leaseSeconds(60)
      .timeoutMillis(20_000)
      .consume((m) => void handled.push(m.data));
    await sleep(1000);
    await client().queue(q).push([{ data: "late" }]);
    await sleep(150);
    await c.stopAndCancel({ timeoutMillis: 5000 });
    expect(await leftAtOnce(q, 2000)).toEqual(["late"]);
    expect(handled).toEqual([]);
  });

  it.each([true, false])("the messages() iterator (autoAck %s) does the same when its signal aborts: none of the pop's messages was handed over", async (autoAck) => {
    proxy = await SlowAnswerProxy.start(brokerUrl(), 600);
    const q = uniq("softstop-iter");
    const handled: unknown[] = [];
    const ctl = new AbortController();
    const reading = (async () => {
      const messages = client({ url: proxy!.url }).queue(q).leaseSeconds(60).timeoutMillis(20_000).autoAck(autoAck).messages({ signal: ctl.signal });
      for await (const m of messages) handled.push(m.data);
    })();
    await sleep(1000);
    await client().queue(q).push([{ data: "late" }]);
    await sleep(150);
    ctl.abort();
    await reading;
    expect(await leftAtOnce(q, 2000)).toEqual(["late"]);
    expect(handled).toEqual([]);
  });

  it("the client's close() right after the abort, before the iteration has ended, leaves the cut pop's release to go out: close() releases no connection in use", async () => {
    proxy = await SlowAnswerProxy.start(brokerUrl(), 600);
    const q = uniq("softstop-iter-close");
    const handled: unknown[] = [];
    const ctl = new AbortController();
    const lanes = client({ url: proxy.url });
    const reading = (async () => {
      for await (const m of lanes.queue(q).leaseSeconds(60).timeoutMillis(20_000).messages({ signal: ctl.signal })) handled.push(m.data);
    })();
    await sleep(1000);
    await client().queue(q).push([{ data: "late" }]);
    await sleep(150);
    ctl.abort();
    await lanes.close();
    await reading;
    expect(await leftAtOnce(q, 2000)).toEqual(["late"]);
    expect(handled).toEqual([]);
  });

  it("a parked pop with no answer yet ends at once: the broker answers the half-close and claims nothing", async () => {
    const q = uniq("softstop-parked");
    const c = client().queue(q).leaseSeconds(60).timeoutMillis(20_000).consume(() => undefined);
    await sleep(500);
    const t0 = Date.now();
    await c.stop({ timeoutMillis: 5000 });
    expect(Date.now() - t0).toBeLessThan(1000);
    await client().queue(q).push([{ data: "after" }]);
    expect(await leftAtOnce(q, 2000)).toEqual(["after"]);
  });

  it("a pop whose answer does not come within 2 s of the half-close is aborted: the stop does not wait for it", async () => {
    proxy = await SlowAnswerProxy.start(brokerUrl(), 10_000);
    const q = uniq("softstop-bound");
    const c = client({ url: proxy.url }).queue(q).timeoutMillis(20_000).consume(() => undefined);
    await sleep(500);
    const t0 = Date.now();
    await c.stop({ timeoutMillis: 8000 });
    const took = Date.now() - t0;
    expect(took).toBeGreaterThanOrEqual(1900);
    expect(took).toBeLessThan(3500);
  });
});

describe("the connections of half-closed pops", () => {
  it("are not reused: consumers started and stopped 20 times on one client, then one gets a message at once, and no attempt failed", async () => {
    const retries: string[] = []; // a request sent on a half-closed connection would fail and be retried
    const lanes = client({ logger: { debug: (line) => void (line.includes("retry") && retries.push(line)) } });
    const q = uniq("softstop-reuse");
    const errors: unknown[] = [];
    for (let i = 0; i < 20; i++) {
      const c = lanes.queue(q).concurrency(2).timeoutMillis(20_000).onError((e) => errors.push(e)).consume(() => undefined);
      await sleep(50);
      await c.stop({ timeoutMillis: 5000 });
    }
    const handled: unknown[] = [];
    const c = lanes.queue(q).timeoutMillis(20_000).onError((e) => errors.push(e)).consume((m) => void handled.push(m.data));
    await sleep(200);
    await client().queue(q).push([{ data: "next" }]);
    const t0 = Date.now();
    while (handled.length === 0 && Date.now() - t0 < 3000) await sleep(20);
    await c.stop({ timeoutMillis: 5000 });
    expect(handled).toEqual(["next"]);
    expect(errors).toEqual([]);
    expect(retries).toEqual([]);
  });

  it("on a caller's own fetch, which hides the connection, the stop aborts the pop as before: it ends at once", async () => {
    const q = uniq("softstop-ownfetch");
    const c = client({ fetch: (input, init) => fetch(input, init) })
      .queue(q)
      .timeoutMillis(20_000)
      .consume(() => undefined);
    await sleep(500);
    const t0 = Date.now();
    await c.stop({ timeoutMillis: 5000 });
    expect(Date.now() - t0).toBeLessThan(500);
    await client().queue(q).push([{ data: "after" }]);
    expect(await leftAtOnce(q, 2000)).toEqual(["after"]);
  });
});
