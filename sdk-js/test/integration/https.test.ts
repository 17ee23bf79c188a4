// Over https the consume loop's pops still go through node:https and are half-closed at a stop
// (docs/consuming.md §5). The broker's CA reaches the SDK as an app gives it to Node: through
// NODE_EXTRA_CA_CERTS, which Node reads only at start, so the consumer runs in its own Node process
// on a fresh build of src/, in front of the test broker a TLS proxy with a certificate of that CA.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createServer, type Server, type TLSSocket } from "node:tls";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokerUrl, client, uniq } from "./helpers.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const tlsDir = join(root, "test/fixtures/tls");
const scratch = mkdtempSync(join(tmpdir(), "lanes-https-"));

/** SlowTlsProxy ends TLS in front of the broker, passes each answer's bytes on `delayMs` after the broker wrote them and a client's half-close on at once, and counts the TLS connections. */
class SlowTlsProxy {
  connections = 0;
  private readonly server: Server;
  private readonly sockets = new Set<{ destroy(): void }>();

  constructor(
    private readonly broker: URL,
    private readonly delayMs: number,
  ) {
    this.server = createServer(
      { key: readFileSync(join(tlsDir, "server-key.pem")), cert: readFileSync(join(tlsDir, "server.pem")), allowHalfOpen: true },
      (c) => this.pipe(c),
    );
  }

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    return `https://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }

  private pipe(app: TLSSocket): void {
    this.connections++;
    const broker = connect({ host: this.broker.hostname, port: Number(this.broker.port), allowHalfOpen: true });
    for (const s of [app, broker]) {
      this.sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => this.sockets.delete(s));
    }
    app.on("data", (chunk) => broker.write(chunk));
    app.on("end", () => broker.end());
    broker.on("data", (chunk) => setTimeout(() => app.write(chunk), this.delayMs));
    broker.on("end", () => setTimeout(() => app.end(), this.delayMs));
  }
}

let build = "";
beforeAll(() => {
  build = join(scratch, "dist");
  execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", "tsconfig.build.json", "--outDir", build, "--declaration", "false", "--sourceMap", "false"], { cwd: root, stdio: "pipe" });
}, 60_000);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** runNode runs `body` (an ES module with the SDK build as `Lanes`) in its own Node process with `env` added, and returns what it printed. */
function runNode(body: string, env: Record<string, string>): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const script = join(scratch, `${Math.random().toString(36).slice(2)}.mjs`);
  writeFileSync(
    script,
    `import { Lanes } from ${JSON.stringify(pathToFileURL(join(build, "index.js")).href)};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
${body}`,
  );
  return new Promise((done) => {
    const child = spawn(process.execPath, [script], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], timeout: 20_000 });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c) => (stdout += c));
    child.stderr.on("data", (c) => (stderr += c));
    child.on("close", (status) => done({ status, stdout, stderr }));
  });
}

describe("the consumer over https, the broker's CA given in NODE_EXTRA_CA_CERTS", () => {
  it("pops through node:https, and a soft stop while the answer is on the way releases it: a fresh pop gets it at once, not after the 60 s lease", async () => {
    const proxy = new SlowTlsProxy(new URL(brokerUrl()), 600);
    const url = await proxy.start();
    const q = uniq("https-softstop");
    try {
      const run = await runNode(
        `const lanes = new Lanes({ url: ${JSON.stringify(url)}, env: {}, logger: null });
const direct = new Lanes({ url: ${JSON.stringify(brokerUrl())}, env: {}, logger: null });
const q = ${JSON.stringify(q)};
await lanes.health(); // the global fetch trusts the CA too
const handled = [];
const c = lanes.queue(q).leaseSeconds(60).timeoutMillis(20000).consume((m) => void handled.push(m.data));
await sleep(1000); // the long poll is parked on the broker
await direct.queue(q).push([{ data: "late" }]);
await sleep(150); // the broker wrote its answer; the proxy holds it
const started = Date.now();
await c.stop({ timeoutMillis: 5000 });
console.log(JSON.stringify({ handled, stopMillis: Date.now() - started }));
await lanes.close(); await direct.close();`,
        { NODE_EXTRA_CA_CERTS: join(tlsDir, "ca.pem") },
      );
      expect(run.status, run.stderr).toBe(0);
      const out = JSON.parse(run.stdout) as { handled: unknown[]; stopMillis: number };
      expect(out.handled).toEqual([]);
      expect(out.stopMillis).toBeLessThan(2000);
      expect(proxy.connections).toBeGreaterThanOrEqual(2); // the health check's and the pop's
      const left = await client().queue(q).leaseSeconds(60).timeoutMillis(2000).pop();
      expect(left.map((m) => m.data)).toEqual(["late"]);
    } finally {
      await proxy.close();
    }
  });
});
