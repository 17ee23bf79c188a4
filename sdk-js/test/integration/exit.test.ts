// A consumer, iterator or buffer ended in each way it can end leaves no timer or socket holding
// Node, and no promise rejected without a handler: a script that stops it and then simply ends
// (no process.exit) exits at once. Each way runs in its own Node process on a fresh build of src/.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokerUrl } from "./helpers.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const scratch = mkdtempSync(join(tmpdir(), "lanes-exit-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** ENDS maps each way to end a consumer (or iterator, or buffer) to the body of an async function of `lanes` (a client) and `q` (a fresh queue name). */
const ENDS: Record<string, string> = {
  "stop with a pop parked": `
    const c = lanes.queue(q).timeoutMillis(10000).consume(() => {});
    await sleep(300);
    await c.stop();`,
  "stopAndCancel of a handler under lease renewal": `
    await lanes.queue(q).push([{ data: 1 }, { data: 2 }]);
    let started; const running = new Promise((r) => (started = r));
    const c = lanes.queue(q).renewLease(true, 50).consume((_m, ctx) => { started(); return new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))); });
    await running; await sleep(150);
    await c.stopAndCancel();`,
  "abort of the consume signal": `
    const ac = new AbortController();
    const c = lanes.queue(q).timeoutMillis(10000).idleMillis(3600000).consume(() => {}, { signal: ac.signal });
    await sleep(300); ac.abort();
    await c;`,
  "terminal error, awaited": `
    const c = lanes.queue(q).batch(1000000).consume(() => {});
    let failed = false;
    try { await c; } catch { failed = true; }
    if (!failed) throw new Error("the 400 did not end the consumer");`,
  "terminal error, never awaited": `
    const c = lanes.queue(q).batch(1000000).consume(() => {});
    while (!c.done) await sleep(20);`,
  "limit": `
    await lanes.queue(q).push([{ data: 1 }, { data: 2 }, { data: 3 }]);
    await lanes.queue(q).limit(2).concurrency(3).consume(() => {});`,
  "idle timeout": `
    await lanes.queue(q).timeoutMillis(100).idleMillis(300).consume(() => {});`,
  "stop timing out before a slow handler returns": `
    await lanes.queue(q).push([{ data: 1 }]);
    let started; const running = new Promise((r) => (started = r));
    const c = lanes.queue(q).consume(async () => { started(); await sleep(500); });
    await running;
    await c.stop({ timeoutMillis: 50 }).then(() => { throw new Error("stop did not time out"); }, () => undefined);
    await c;`,
  "stop from the handler": `
    await lanes.queue(q).push([{ data: 1 }]);
    const c = lanes.queue(q).consume(async () => { await c.stop(); });
    await c;`,
  "break out of the iterator": `
    await lanes.queue(q).push([{ data: 1 }, { data: 2 }]);
    for await (const _m of lanes.queue(q).batch(2).renewLease(true, 50).messages()) { await sleep(120); break; }`,
  "abort of the iterator signal": `
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    for await (const _m of lanes.queue(q).timeoutMillis(10000).messages({ signal: ac.signal })) { /* none */ }`,
  "iterator idle timeout": `
    for await (const _m of lanes.queue(q).timeoutMillis(100).idleMillis(300).messages()) { /* none */ }`,
  "close with a buffer waiting": `
    await lanes.queue(q).buffer({ timeMillis: 3600000 }).push([{ data: 1 }]);`,
};

let build = "";
beforeAll(() => {
  build = join(scratch, "dist");
  execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", "tsconfig.build.json", "--outDir", build, "--declaration", "false", "--sourceMap", "false"], { cwd: root, stdio: "pipe" });
}, 60_000);

/** runScript runs `body` (an ES module importing the SDK build as `Lanes`) in its own Node process with the broker URL as its argument, and requires that it prints "ended" and exits by itself within 5 s, with no unhandled rejection. */
function runScript(name: string, body: string): void {
  const script = join(scratch, `${name}.mjs`);
  writeFileSync(
    script,
    `import { Lanes } from ${JSON.stringify(pathToFileURL(join(build, "index.js")).href)};
process.on("unhandledRejection", (err) => { console.error("unhandled rejection:", err); process.exitCode = 3; });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
${body}
console.log("ended");
`,
  );
  const started = Date.now();
  const run = spawnSync(process.execPath, [script, brokerUrl()], { encoding: "utf8", timeout: 10_000, killSignal: "SIGKILL" });
  const took = Date.now() - started;
  expect(run.signal, `still running after 10 s (something holds Node): ${run.stdout}${run.stderr}`).toBeNull();
  expect(run.status, run.stderr).toBe(0);
  expect(run.stdout.trim()).toBe("ended");
  expect(took).toBeLessThan(5_000);
}

describe("a script that ends a consumer and does not call process.exit", () => {
  it.each(Object.keys(ENDS))("exits at once after %s", (end) => {
    runScript(
      String(Object.keys(ENDS).indexOf(end)),
      `const lanes = new Lanes({ url: process.argv[2], env: {}, logger: null });
const q = "test-js-exit-" + Math.random().toString(36).slice(2, 10);
${ENDS[end]}
await lanes.close();`,
    );
  });

  it("exits at once after a close that gave up on a broker that does not answer", () => {
    // The flush in flight used to go on after close() rejected, holding Node for up to three
    // 30 s attempts (and able to send the items close() had reported unsent).
    runScript(
      "stalled",
      `import net from "node:net";
const stalled = net.createServer((socket) => socket.unref());
await new Promise((r) => stalled.listen(0, "127.0.0.1", r));
stalled.unref();
const lanes = new Lanes({ url: "http://127.0.0.1:" + stalled.address().port, env: {}, logger: null });
const buffer = lanes.queue("stalled").buffer({ timeMillis: 3600000 });
await buffer.push([{ data: 1 }]);
const unsent = await lanes.close({ timeoutMillis: 300 }).then(() => 0, (err) => err.unsent);
if (unsent !== 1 || buffer.size !== 1) throw new Error("close must report the item unsent and keep it: " + unsent + " " + buffer.size);`,
    );
  });
});
