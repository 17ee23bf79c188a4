// The client's close() and an iterator holding messages it has not handed over yet (the same
// cases run in sdk-go, iterator_close_integration_test.go, and sdk-python,
// test_close_ends_iterators.py). close() ends no iteration and releases no connection in use
// (docs/consuming.md §5), so what the iterator holds stays its caller's until the loop ends, and
// the loop's release goes out after close() too: a fresh client gets those messages at once, not
// after their 60 s lease.
import { describe, expect, it } from "vitest";
import type { Lanes } from "../../src/index.js";
import { client, uniq } from "./helpers.js";

/** freeAtOnce is what a fresh client's pop gets at once (no wait), acked so nothing stays leased. */
async function freeAtOnce(q: string): Promise<unknown[]> {
  const c = client();
  const got = await c.queue(q).batch(10).autopilot(false).wait(false).pop();
  if (got.length > 0) await c.ack(got);
  await c.close();
  return got.map((m) => m.data);
}

/** iterateTwoThen pushes five messages to one partition, loops over them with batch 5 and calls atSecond in the loop body of the second; the loop goes on while it returns true, and is left at the third. */
async function iterateTwoThen(lanes: Lanes, q: string, signal: AbortSignal | undefined, atSecond: () => Promise<boolean>): Promise<unknown[]> {
  await lanes.queue(q).push([1, 2, 3, 4, 5].map((data) => ({ data })));
  const handed: unknown[] = [];
  for await (const m of lanes.queue(q).batch(5).leaseSeconds(60).autopilot(false).messages({ signal })) {
    handed.push(m.data);
    if (handed.length === 2 && !(await atSecond())) break;
    if (handed.length === 3) break;
  }
  return handed;
}

describe("the client's close() with an iterator holding messages it has not handed over", () => {
  it("stopped, then the client closes: the loop's end releases them after close()", async () => {
    const q = uniq("iter-close-stopped");
    const lanes = client();
    const ctl = new AbortController();
    const handed = await iterateTwoThen(lanes, q, ctl.signal, async () => {
      ctl.abort();
      await lanes.close();
      return true; // the loop ends on the aborted signal, after close()
    });
    expect(handed).toEqual([1, 2]);
    // Both were handled (acked completed); the three not handed over are released.
    expect(await freeAtOnce(q)).toEqual([3, 4, 5]);
  });

  it("the client closes inside the loop: the iteration goes on, and leaving it releases what it holds", async () => {
    const q = uniq("iter-close-live");
    const lanes = client();
    let held: unknown[] = ["unchecked"];
    const handed = await iterateTwoThen(lanes, q, undefined, async () => {
      await lanes.close();
      held = await freeAtOnce(q); // still the caller's: the iteration goes on
      return true;
    });
    expect(held).toEqual([]);
    expect(handed).toEqual([1, 2, 3]);
    expect(await freeAtOnce(q)).toEqual([3, 4, 5]);
  });
});
