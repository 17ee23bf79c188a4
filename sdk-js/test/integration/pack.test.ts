// `npm pack` produces an installable package with type declarations (its prepack script builds
// dist/): install the tarball into a scratch project and run a produce/consume round trip with
// plain Node, from an ES module and from CommonJS.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { brokerUrl, client, uniq } from "./helpers.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const scratch = mkdtempSync(join(tmpdir(), "lanes-pack-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("npm pack", () => {
  it("installs into a scratch project and round-trips a message", async () => {
    const url = brokerUrl();
    const run = (cmd: string, args: string[], cwd: string) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    // Pack a copy without dist/, as a fresh clone has it: the prepack script must build it.
    const clone = join(scratch, "clone");
    mkdirSync(clone);
    for (const f of ["package.json", "tsconfig.json", "tsconfig.build.json", "README.md", "src"]) cpSync(join(root, f), join(clone, f), { recursive: true });
    symlinkSync(join(root, "node_modules"), join(clone, "node_modules"));
    const out = run("npm", ["pack", "--silent", "--pack-destination", scratch], clone).trim().split("\n").pop()!;
    const tarball = join(scratch, out);
    expect(existsSync(tarball)).toBe(true);
    const app = join(scratch, "app");
    run("mkdir", ["-p", app], scratch);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
    const install = spawnSync("npm", ["install", "--no-audit", "--no-fund", "--offline", tarball], { cwd: app, encoding: "utf8" });
    expect(install.status, install.stderr).toBe(0);
    // The package ships no install-time script: npm 11 warns about one at every install.
    expect(install.stderr).not.toContain("install-scripts");
    const installed = JSON.parse(readFileSync(join(app, "node_modules/@lanesmq/lanes/package.json"), "utf8")) as { scripts?: Record<string, string> };
    expect(["preinstall", "install", "postinstall", "prepare"].filter((name) => installed.scripts?.[name] !== undefined)).toEqual([]);
    const pkg = join(app, "node_modules/@lanesmq/lanes/dist");
    expect(readdirSync(pkg)).toEqual(expect.arrayContaining(["index.js", "index.d.ts"]));
    const q = uniq("pack");
    writeFileSync(
      join(app, "main.mjs"),
      `import { Lanes } from "@lanesmq/lanes";
const lanes = new Lanes({ url: ${JSON.stringify(url)} });
await lanes.queue(${JSON.stringify(q)}).push([{ data: { hello: "pack" } }]);
let got;
await lanes.queue(${JSON.stringify(q)}).limit(1).consume((m) => { got = m.data; });
console.log(JSON.stringify(got));
`,
    );
    expect(run("node", ["main.mjs"], app).trim()).toBe('{"hello":"pack"}');
    // A CommonJS app require()s it (Node's require of an ES module, 20.19+ and 22.12+).
    writeFileSync(
      join(app, "main.cjs"),
      `const { Lanes } = require("@lanesmq/lanes");
const lanes = new Lanes({ url: ${JSON.stringify(url)} });
(async () => {
  await lanes.queue(${JSON.stringify(q + "-cjs")}).push([{ data: { hello: "require" } }]);
  let got;
  await lanes.queue(${JSON.stringify(q + "-cjs")}).limit(1).consume((m) => { got = m.data; });
  console.log(JSON.stringify(got));
})();
`,
    );
    expect(run("node", ["main.cjs"], app).trim()).toBe('{"hello":"require"}');
    // close() sends what the buffer holds and lets the process exit at once, not at its
    // 30 s deadline (a timer of the deadline outlived the flush).
    writeFileSync(
      join(app, "buffer.mjs"),
      `import { Lanes } from "@lanesmq/lanes";
const lanes = new Lanes({ url: ${JSON.stringify(url)} });
const buf = lanes.queue(${JSON.stringify(q + "-buffer")}).buffer({ messageCount: 100, timeMillis: 60000 });
await buf.push([{ data: 1 }]);
await lanes.close();
`,
    );
    const started = Date.now();
    run("node", ["buffer.mjs"], app);
    expect(Date.now() - started).toBeLessThan(10_000);
    // A script that ends without close() still sends what its buffer holds (the beforeExit hook).
    writeFileSync(
      join(app, "exit.mjs"),
      `import { Lanes } from "@lanesmq/lanes";
const lanes = new Lanes({ url: ${JSON.stringify(url)}, logger: null });
await lanes.queue(${JSON.stringify(q + "-exit")}).buffer({ messageCount: 100, timeMillis: 60000 }).push([1, 2, 3, 4, 5]);
`,
    );
    run("node", ["exit.mjs"], app);
    const exited = await client().queue(q + "-exit").batch(10).wait(false).pop();
    expect(exited.map((m) => m.data)).toEqual([1, 2, 3, 4, 5]);
    // the declarations type-check a consumer
    writeFileSync(
      join(app, "check.ts"),
      `import { Lanes, type Message, PushError } from "@lanesmq/lanes";
const lanes = new Lanes({ url: "http://localhost:6632" });
const m: Promise<Message<{ n: number }>[]> = lanes.queue<{ n: number }>("q").pop();
void m; void PushError;
`,
    );
    // and a CommonJS file's import, which module NodeNext compiles to the require() above
    writeFileSync(
      join(app, "check-require.cts"),
      `import { Lanes } from "@lanesmq/lanes";
void new Lanes({ url: "http://localhost:6632" }).close();
`,
    );
    // and every optional option takes an explicit undefined (a value an app may or may not have)
    writeFileSync(
      join(app, "check-undefined.ts"),
      `import { Lanes } from "@lanesmq/lanes";
const u = undefined as string | undefined, n = undefined as number | undefined, b = undefined as boolean | undefined;
const signal = undefined as AbortSignal | undefined;
const lanes = new Lanes({ url: u, urls: undefined, bearerToken: u, headers: undefined, timeoutMillis: n, retryAttempts: n, retryDelayMillis: n,
  maxRetryDelayMillis: n, max429Attempts: n, maxRetryAfterMillis: n, healthRetryAfterMillis: n, popAutopilot: b, logger: undefined, fetch: undefined, env: undefined });
const q = lanes.queue("q");
q.buffer({ messageCount: n, timeMillis: n, maxSize: n, retryDelayMillis: n, onError: undefined });
void q.push([1], { signal }); void q.pop({ signal }); void q.messages({ signal }); void q.create({ mode: undefined });
const kv = lanes.kv("ns");
void kv.put("k", 1, { forever: true }, { expect: n, required: b }); void kv.delete("k", { expect: n });
void kv.incr("k", 1, { forever: true }, { min: n, max: n }); void kv.getPrefix("k", { after: u, limit: n, keysOnly: b });
void kv.list({ prefix: u, after: u, limit: n, keysOnly: b, includeExpired: b });
void lanes.timers("q").schedule("t", { delayMillis: 1, partition: u, transactionId: u }); void lanes.timers("q").list({ limit: n, after: u, prefix: u });
void lanes.admin.listDlq({ queue: u, consumerGroup: u, partition: u, from: u, to: u, limit: n, offset: n });
void lanes.admin.listQueues({ namespace: u, task: u, limit: n, offset: n }); void lanes.admin.getStatus({ from: u, to: u, queue: u, namespace: u, task: u });
void lanes.admin.listQueueStatus({ queue: u, namespace: u, task: u, limit: n, offset: n }); void lanes.admin.configureQueue("q", {}, { mode: undefined, namespace: u, task: u });
void lanes.transaction().kv.put("ns", "k", 1, { forever: true }, { expect: n, required: b }).kv.putIfAbsent("ns", "k", 1, { forever: true }, { required: b })
  .kv.delete("ns", "k", { expect: n, required: b }).kv.incr("ns", "k", 1, { forever: true }, { min: n, max: n, required: b }).commit({ signal });
void lanes.renew([], { seconds: n }); void lanes.close({ timeoutMillis: n });
`,
    );
    // and every ```ts snippet of README.md compiles as written, under the strictest options an
    // app may use (exactOptionalPropertyTypes refused `{ url: process.env.LANES_URL }`)
    const readme = [...readFileSync(join(root, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m, i) => {
      writeFileSync(join(app, `readme-${i + 1}.ts`), `${m[1]!}\nexport {};\n`);
      return `readme-${i + 1}.ts`;
    });
    expect(readme.length).toBeGreaterThanOrEqual(5);
    const strictest = { strict: true, exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true };
    const compilerOptions = { ...strictest, module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", noEmit: true, typeRoots: [join(root, "node_modules/@types")], types: ["node"] };
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["check.ts", "check-require.cts", "check-undefined.ts", ...readme] }));
    const tsc = spawnSync(join(root, "node_modules/.bin/tsc"), ["-p", "."], { cwd: app, encoding: "utf8" });
    expect(tsc.status, tsc.stdout + tsc.stderr).toBe(0);
  }, 120_000);
});
