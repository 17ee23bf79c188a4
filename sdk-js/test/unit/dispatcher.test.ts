// Which global dispatcher counts as the app's (popcut.ts): Node's fetch installs a default one
// when it loads; any other one means the app configured fetch, so the loops' pops use fetch.
import { afterEach, describe, expect, it, vi } from "vitest";
import type * as popcut from "../../src/internal/popcut.js";

const GLOBAL_DISPATCHER = Symbol.for("undici.globalDispatcher.1");
const g = globalThis as unknown as Record<symbol, unknown>;
const appDispatcher = { dispatch: () => true };

/** loadSdk evaluates popcut.ts anew, as a process loading the SDK would. */
async function loadSdk(): Promise<typeof popcut> {
  vi.resetModules();
  return import("../../src/internal/popcut.js");
}

let restore: unknown;
afterEach(() => {
  if (restore !== undefined) g[GLOBAL_DISPATCHER] = restore;
  restore = undefined;
});

describe("appDispatcherInstalled", () => {
  // Runs first: nothing in this file's process has loaded Node's fetch yet.
  it("is false for the default dispatcher Node's fetch installs, true once the app sets another, false again when it is put back", async () => {
    expect(g[GLOBAL_DISPATCHER]).toBeUndefined();
    const { appDispatcherInstalled } = await loadSdk();
    const nodeDefault = g[GLOBAL_DISPATCHER];
    expect(nodeDefault).toBeDefined(); // loading the SDK loaded Node's fetch
    expect(appDispatcherInstalled()).toBe(false);
    restore = nodeDefault;
    g[GLOBAL_DISPATCHER] = appDispatcher;
    expect(appDispatcherInstalled()).toBe(true);
    g[GLOBAL_DISPATCHER] = nodeDefault;
    expect(appDispatcherInstalled()).toBe(false);
  });

  it("is true for a dispatcher already set when the SDK loads: it cannot be told from Node's default", async () => {
    restore = g[GLOBAL_DISPATCHER];
    g[GLOBAL_DISPATCHER] = appDispatcher;
    const { appDispatcherInstalled } = await loadSdk();
    expect(appDispatcherInstalled()).toBe(true);
  });
});
