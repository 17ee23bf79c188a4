// The group and lagging listings span every group on the broker: the whole-listing calls follow
// the broker's key, which groups gaining or losing rows between two pages do not shift; a queue's
// partition listings follow the nextAfter of their answers the same way.
import { describe, expect, it } from "vitest";
import { brokerUrl, client, uniq } from "./helpers.js";

/**
 * smallPages is a fetch that asks the group-wide listings for pages of `limit` rows until two pages
 * after the first that holds `marker`, after which it runs `between` once; so a few rows take
 * several pages, and the rest (the other tests' rows) come in the SDK's own pages.
 */
function smallPages(o: { limit: string; small: number; marker?: string; between?: () => Promise<void>; dropAfter: boolean; path?: string }) {
  const seen = { keyed: 0 };
  const wrapped: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (!url.pathname.startsWith(o.path ?? "/api/v1/consumer-groups")) return fetch(input, init);
    if (o.between !== undefined || o.small > 0) {
      o.small--;
      url.searchParams.set("limit", o.limit);
    }
    if (url.searchParams.has("after")) seen.keyed++;
    const res = await fetch(url, init);
    const body = await res.text();
    const headers = new Headers(res.headers);
    if (o.dropAfter) headers.delete("x-lanes-next-after"); // a broker before keyed paging
    if (o.between !== undefined && o.marker !== undefined && body.includes(o.marker)) {
      await o.between();
      o.between = undefined;
      o.small = 2;
    }
    return new Response(body, { status: res.status, headers });
  };
  return { fetch: wrapped, seen, o };
}

describe("group-wide listings", () => {
  for (const dropAfter of [false, true]) {
    it(`follow ${dropAfter ? "the offset from a broker that gives no key" : "the key"} while a group that sorts first loses its rows`, async () => {
      const lanes = client();
      const q = uniq("keyset");
      // "0-" sorts before the other tests' groups, on the first pages.
      const early = `0-${q}-a`;
      const later = `0-${q}-b`;
      const partitions = ["p0", "p1", "p2", "p3", "p4", "p5"];
      const tx = lanes.transaction();
      partitions.forEach((p, i) => tx.queue(q).partition(p).push([{ data: i }]));
      await tx.commit();
      for (const g of [early, later]) await lanes.admin.seekConsumerGroup(g, q, { timestamp: new Date(0) });
      const deleteEarly = async () => {
        const res = await fetch(`${brokerUrl()}/api/v1/consumer-groups/${encodeURIComponent(early)}`, { method: "DELETE" });
        expect(res.status).toBe(200);
      };
      const paged = smallPages({ limit: "4", small: 3, dropAfter });
      if (!dropAfter) Object.assign(paged.o, { marker: `"consumer_group":${JSON.stringify(early)}`, between: deleteEarly });
      const admin = client({ fetch: paged.fetch }).admin;
      try {
        const lagging = await admin.laggingConsumerGroups(0);
        expect(lagging.filter((r) => r.consumer_group === later).map((r) => r.partition_name)).toEqual(partitions);

        if (dropAfter) {
          await deleteEarly();
          paged.o.small = 3;
        } else {
          // Seek the early group again: a row of the group list each, one row a page.
          await lanes.admin.seekConsumerGroup(early, q, { timestamp: new Date(0) });
          Object.assign(paged.o, { limit: "1", marker: `"name":${JSON.stringify(early)}`, between: deleteEarly });
        }
        const names = (await admin.listConsumerGroups()).map((g) => g.name).filter((n) => n.startsWith(`0-${q}`));
        expect(names).toEqual(dropAfter ? [later] : [early, later]);
        if (dropAfter) expect(paged.seen.keyed).toBe(0);
        else expect(paged.seen.keyed).toBeGreaterThan(0);
      } finally {
        // The next run's groups sort after these, which would take its first pages.
        for (const g of [early, later]) await lanes.admin.deleteConsumerGroup(g);
      }
    });
  }
});

/**
 * partitionPages is a fetch that asks one queue's partition listings (detail, depth, status) for
 * pages of 4 rows and runs `between` after the first page of each; `dropAfter` strips nextAfter,
 * as a broker before keyed paging sends none.
 */
function partitionPages(queue: string, between: () => Promise<void>, dropAfter: boolean) {
  const seen = { keyed: 0 };
  const wrapped: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (!url.pathname.includes(`/queues/${queue}`)) return fetch(input, init);
    url.searchParams.set("limit", "4");
    const first = !url.searchParams.has("after") && !url.searchParams.has("offset");
    if (url.searchParams.has("after")) seen.keyed++;
    const res = await fetch(url, init);
    const body = (await res.json()) as Record<string, unknown>;
    if (dropAfter) delete body.nextAfter;
    if (first) await between();
    const headers = new Headers(res.headers);
    headers.delete("content-length");
    return new Response(JSON.stringify(body), { status: res.status, headers });
  };
  return { fetch: wrapped, seen };
}

describe("a queue's partition listings", () => {
  for (const dropAfter of [false, true]) {
    it(`follow ${dropAfter ? "the offset from a broker that gives no key" : "the key"} while a partition that sorts first is created`, async () => {
      const lanes = client();
      const q = uniq("partkeys");
      const partitions = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"];
      const tx = lanes.transaction();
      partitions.forEach((p, i) => tx.queue(q).partition(p).push([{ data: i }]));
      await tx.commit();
      let created = 0;
      // "0-…" sorts before "p…": every later partition moves one place.
      const createEarly = async () => {
        created++;
        await lanes.queue(q).partition(`0-new-${created}`).push([{ data: created }]);
      };
      const paged = partitionPages(q, createEarly, dropAfter);
      const admin = client({ fetch: paged.fetch }).admin;
      const check = (names: string[]) => {
        const listed = names.filter((n) => n.startsWith("p"));
        // From an older broker the first page's last row comes again on the second.
        if (dropAfter) expect(listed.length).toBe(partitions.length + 1);
        expect([...new Set(listed)]).toEqual(partitions);
        if (!dropAfter) expect(listed).toEqual(partitions);
      };
      check((await admin.getQueue(q)).partitions.map((p) => p.name));
      check((await admin.getQueueDepth(q)).partitions.map((p) => p.partition));
      // The builder's depth is the same whole listing, not its first page.
      const built = await client({ fetch: paged.fetch }).queue(q).depth();
      check(built.partitions.map((p) => p.partition));
      expect(built.truncated).toBe(false);
      const status = await admin.getQueueStatus(q, true);
      check((status.partitions ?? []).map((p) => p.name));
      expect(status.truncated).toBe(false);
      if (dropAfter) expect(paged.seen.keyed).toBe(0);
      else {
        expect(paged.seen.keyed).toBeGreaterThan(0);
        expect(status.nextAfter).toBeNull();
      }
    });
  }
});

describe("label listings", () => {
  // The labels start with "0-", so they sort before the other tests' labels, on the first pages.
  const cases: { name: string; path: string; list: (l: ReturnType<typeof client>) => Promise<string[]> }[] = [
    { name: "namespaces", path: "/api/v1/resources/namespaces", list: async (l) => (await l.admin.getNamespaces()).namespaces.map((n) => n.namespace) },
    { name: "tasks", path: "/api/v1/resources/tasks", list: async (l) => (await l.admin.getTasks()).tasks.map((t) => t.task) },
    { name: "kv namespaces", path: "/api/v1/resources/kv/namespaces", list: async (l) => (await l.kvNamespaces()).namespaces.map((n) => n.namespace ?? "") },
  ];
  for (const c of cases) {
    it(`${c.name} follow the key while a label that sorts first goes`, async () => {
      const lanes = client();
      const q = uniq("labelkeys");
      const prefix = `0-${q}-`;
      const labels = [`${prefix}a`, `${prefix}b`, `${prefix}c`];
      for (const [i, label] of labels.entries()) {
        if (c.name === "kv namespaces") await lanes.kv(label).put("k", i, { forever: true });
        else await lanes.admin.configureQueue(`${q}-${i}`, {}, c.name === "tasks" ? { task: label } : { namespace: label });
      }
      const removeFirst = async () => {
        if (c.name === "kv namespaces") await lanes.kv(labels[0] as string).delete("k");
        else await lanes.admin.deleteQueue(`${q}-0`);
      };
      const paged = smallPages({ limit: "1", small: 0, marker: JSON.stringify(labels[0]), between: removeFirst, dropAfter: false, path: c.path });
      const listed = (await c.list(client({ fetch: paged.fetch }))).filter((n) => n.startsWith(prefix));
      expect(listed).toEqual(labels);
      expect(paged.seen.keyed).toBeGreaterThan(0);
    });
  }
});

describe("queue lists", () => {
  it("page by key while a queue that sorts first is deleted", async () => {
    const lanes = client();
    const q = uniq("queuekeys");
    const namespace = `${q}-ns`;
    const queues = [`${q}-a`, `${q}-b`, `${q}-c`];
    for (const name of queues) await lanes.admin.configureQueue(name, {}, { namespace });
    const first = await lanes.admin.listQueues({ namespace, limit: 1 });
    const firstStatus = await lanes.admin.listQueueStatus({ namespace, limit: 1 });
    expect(first.queues.map((x) => x.name)).toEqual([queues[0]]);
    await lanes.admin.deleteQueue(queues[0] as string);
    // By offset 1 the next page would be the third queue: the second is the one an offset skips.
    const second = await lanes.admin.listQueues({ namespace, limit: 1, after: first.nextAfter ?? undefined });
    expect(second.queues.map((x) => x.name)).toEqual([queues[1]]);
    expect(second.total).toBe(2);
    const secondStatus = await lanes.admin.listQueueStatus({ namespace, limit: 1, after: firstStatus.nextAfter ?? undefined });
    expect(secondStatus.queues.map((x) => x.name)).toEqual([queues[1]]);
    const last = await lanes.admin.listQueues({ namespace, limit: 1, after: second.nextAfter ?? undefined });
    expect(last.queues.map((x) => x.name)).toEqual([queues[2]]);
    expect(last.nextAfter).toBeNull();
  });
});
