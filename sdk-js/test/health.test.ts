// Smoke test for the test wiring: `make test` starts a broker and exports
// LANES_TEST_URL; without it (plain `npm test`) the test is skipped.
import { describe, expect, it } from "vitest";

const url = process.env.LANES_TEST_URL;

describe.skipIf(!url)("broker", () => {
  it("answers GET /health with 200", async () => {
    const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(10_000) });
    expect(res.status).toBe(200);
  });
});
