// Executes every ```ts snippet of README.md against the broker (queue names made unique).
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { brokerUrl } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const snippets = [...readFileSync(join(root, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
const tmp = join(here, `.readme-${randomUUID().slice(0, 8)}`);

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("README snippets", () => {
  it("has snippets", () => expect(snippets.length).toBeGreaterThanOrEqual(5));
  snippets.forEach((code, i) => {
    it(`snippet ${i + 1} runs`, async () => {
      process.env.LANES_URL = brokerUrl();
      const sfx = randomUUID().slice(0, 8);
      const src = code
        .replaceAll('from "@lanesmq/lanes"', `from ${JSON.stringify(join(root, "src/index.ts"))}`)
        .replace(/\bqueue(<[^>]*>)?\((["'])([^"']+)\2\)/g, (_m, g: string | undefined, q: string, name: string) => `queue${g ?? ""}(${q}${name}-${sfx}${q})`)
        // The test stands in for SIGTERM: it stops the snippet's consumer after 500 ms.
        .replace(/process\.once\("SIGTERM", (.+)\);/g, "setTimeout($1, 500);")
        + "\nexport {};\n";
      mkdirSync(tmp, { recursive: true });
      const file = join(tmp, `snippet-${i + 1}.ts`);
      writeFileSync(file, src);
      await import(file);
    }, 30_000);
  });
});
