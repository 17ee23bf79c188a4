// An app that installed a global dispatcher for fetch (undici's setGlobalDispatcher: a proxy, a
// private CA, a client certificate) gets the consume loop's and the iterator's pops through it too,
// as its pushes and acks: the loops then make their pops with the global fetch, and a stop aborts
// them (docs/consuming.md §5).
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { brokerUrl, client, sleep, uniq } from "./helpers.js";

const GLOBAL_DISPATCHER = Symbol.for("undici.globalDispatcher.1");

/** RouteProxy is a TCP proxy to the broker, the route the app's dispatcher sends every connection on; it records each request line it passes. */
class RouteProxy {
  readonly requests: string[] = [];
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();

  private constructor(private readonly broker: URL) {
    this.server = createServer({ allowHalfOpen: true }, (c) => this.pipe(c));
  }

  static async start(broker: string): Promise<RouteProxy> {
    const proxy = new RouteProxy(new URL(broker));
    await new Promise<void>((r) => proxy.server.listen(0, "127.0.0.1", r));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as { port: number }).port;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }

  private pipe(app: Socket): void {
    const broker = connect({ host: this.broker.hostname, port: Number(this.broker.port), allowHalfOpen: true });
    let seen = "";
    for (const s of [app, broker]) {
      this.sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => this.sockets.delete(s));
    }
    app.on("data", (chunk: Buffer) => {
      seen += chunk.toString("latin1");
      for (const m of seen.matchAll(/(?:^|\r\n)((?:GET|POST|PUT|DELETE) \/\S*) HTTP\/1\.1\r\n/g)) this.requests.push(m[1]!);
      seen = seen.slice(Math.max(0, seen.lastIndexOf("\r\n")));
      broker.write(chunk);
    });
    app.on("end", () => broker.end());
    broker.on("data", (chunk) => app.write(chunk));
    broker.on("end", () => app.end());
  }
}

/** installDispatcher does what undici's setGlobalDispatcher does: an Agent of Node's own fetch (its class, as an app's undici Agent) whose connections all go to `port`. It returns the undo. */
function installDispatcher(port: number): () => void {
  void globalThis.Headers; // Node's fetch, loaded, has installed its default dispatcher
  const g = globalThis as unknown as Record<symbol, unknown>;
  const previous = g[GLOBAL_DISPATCHER] as { constructor: new (o: unknown) => unknown };
  g[GLOBAL_DISPATCHER] = new previous.constructor({
    connect: (_opts: unknown, done: (err: Error | null, socket: Socket | null) => void) => {
      const socket = connect({ host: "127.0.0.1", port });
      socket.once("connect", () => done(null, socket));
      socket.once("error", (err) => done(err, null));
    },
  });
  return () => {
    g[GLOBAL_DISPATCHER] = previous;
  };
}

let proxy: RouteProxy | undefined;
let uninstall: (() => void) | undefined;
afterEach(async () => {
  uninstall?.();
  uninstall = undefined;
  await proxy?.close();
  proxy = undefined;
});

const pops = (p: RouteProxy) => p.requests.filter((r) => r.startsWith("GET /api/v1/pop"));

describe("an app's global dispatcher for fetch", () => {
  it("carries the consumer's pops, as it carries pushes, and a stop still ends the parked pop at once", async () => {
    proxy = await RouteProxy.start(brokerUrl());
    uninstall = installDispatcher(proxy.port);
    const q = uniq("dispatcher-consume");
    const handled: unknown[] = [];
    const c = client().queue(q).timeoutMillis(10_000).consume((m) => void handled.push(m.data));
    await client().queue(q).push([{ data: "through the proxy" }]);
    for (let i = 0; i < 100 && handled.length === 0; i++) await sleep(50);
    expect(handled).toEqual(["through the proxy"]);
    expect(proxy.requests.some((r) => r.startsWith("POST /api/v1/push"))).toBe(true);
    expect(pops(proxy).length).toBeGreaterThan(0);
    await sleep(300); // the next pop is parked
    const started = Date.now();
    await c.stop({ timeoutMillis: 5000 });
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("carries the messages() iterator's pops", async () => {
    proxy = await RouteProxy.start(brokerUrl());
    uninstall = installDispatcher(proxy.port);
    const q = uniq("dispatcher-iterate");
    await client().queue(q).push([{ data: 1 }]);
    for await (const m of client().queue(q).timeoutMillis(1000).messages()) {
      expect(m.data).toBe(1);
      break;
    }
    expect(pops(proxy).length).toBeGreaterThan(0);
  });
});
