// A scripted local HTTP server for wire tests: each request is recorded and answered by the
// next step of a script (pure client logic; no broker involved).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
  at: number;
}

export type Step = (req: Seen, res: ServerResponse) => void;

export const reply =
  (status: number, body?: unknown, headers: Record<string, string> = {}): Step =>
  (_req, res) => {
    if (body === undefined) {
      res.writeHead(status, headers);
      res.end();
      return;
    }
    const text = typeof body === "string" ? body : JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(text);
  };

export class FakeServer {
  readonly seen: Seen[] = [];
  private steps: Step[] = [];
  private fallback: Step = reply(500, { error: "script exhausted", code: "internal" });
  private server: Server;
  url = "";

  constructor() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const s: Seen = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), at: Date.now() };
        this.seen.push(s);
        const step = this.steps.shift() ?? this.fallback;
        step(s, res);
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  script(...steps: Step[]): this {
    this.steps.push(...steps);
    return this;
  }

  otherwise(step: Step): this {
    this.fallback = step;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

export const popBody = (messages: { transactionId: string; partitionId?: string; data?: unknown }[], extra: Record<string, unknown> = {}) => ({
  success: true,
  queue: "q",
  partition: "Default",
  partitionId: "p1",
  leaseId: "lease-1",
  consumerGroup: "__QUEUE_MODE__",
  partitionsClaimed: 1,
  messages: messages.map((m) => ({
    id: m.transactionId,
    transactionId: m.transactionId,
    traceId: null,
    data: m.data ?? {},
    producerSub: null,
    createdAt: new Date().toISOString(),
    partitionId: m.partitionId ?? "p1",
    partition: "Default",
    leaseId: "lease-1",
    consumerGroup: "__QUEUE_MODE__",
  })),
  ...extra,
});
