// Pop query assembly (docs/consuming.md §2), byte-exact and pure.

/** AUTOPILOT_BATCH is the broker's automatic batch (http-api-v1.md, "Pop autopilot"): what a pop with autopilot and no batch takes. */
const AUTOPILOT_BATCH = 100;

/** AUTOPILOT_OFF_VALUES are the values of LANES_SDK_POP_AUTOPILOT that switch autopilot off. */
const AUTOPILOT_OFF_VALUES = new Set(["off", "false", "0", "no", "disabled"]);

/** autopilotFromEnv reads LANES_SDK_POP_AUTOPILOT: false when it is off/false/0/no/disabled (case-insensitive, trimmed). */
export function autopilotFromEnv(env: Record<string, string | undefined>): boolean {
  const v = env.LANES_SDK_POP_AUTOPILOT;
  return v === undefined || !AUTOPILOT_OFF_VALUES.has(v.trim().toLowerCase());
}

/** PopKnobs are the pop settings of a builder. `batch`/`partitions` 0 or undefined mean unset. */
export interface PopKnobs {
  batch?: number | undefined;
  partitions?: number | undefined;
  /** autopilot is the builder's explicit choice; undefined = the client default. */
  autopilot?: boolean | undefined;
  wait: boolean;
  timeoutMillis: number;
  group?: string | undefined;
  leaseSeconds?: number | undefined;
  subscriptionMode?: string | undefined;
  subscriptionFrom?: string | undefined;
  serverAutoAck?: boolean | undefined;
  /** maxBatch caps `batch` (the budget of the whole pop): a consumer under serverAutoAck(true) never pops more than what is left of its limit. An unset batch stays the one the pop would take (1 without autopilot, else the automatic 100), cut to maxBatch. */
  maxBatch?: number | undefined;
  /** partitionRoute is true when the builder named a partition (`partitions` never sent). */
  partitionRoute: boolean;
  namespace?: string | undefined;
  task?: string | undefined;
}

const set = (n: number | undefined): n is number => n !== undefined && n !== 0;

/** popBatch is the batch a pop of these knobs takes: `batch` when set, else the automatic batch under autopilot, else 1. */
export function popBatch(k: Pick<PopKnobs, "batch" | "autopilot">, clientAutopilot: boolean): number {
  if (set(k.batch)) return k.batch;
  return (k.autopilot ?? clientAutopilot) ? AUTOPILOT_BATCH : 1;
}

/** queryEscape escapes a query value as Go's url.QueryEscape and Python's quote_plus do (space as "+", every mark but "-_.~" escaped), so the pop query is byte for byte the other SDKs'. */
function queryEscape(value: string): string {
  return encodeURIComponent(value)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%20/g, "+");
}

/** popQuery builds the pop query string; `clientAutopilot` is the client default (false when the env switched it off). */
export function popQuery(k: PopKnobs, clientAutopilot: boolean): string {
  const on = k.autopilot ?? clientAutopilot;
  const batchSet = set(k.batch);
  const partsSet = !k.partitionRoute && set(k.partitions);
  const parts: string[] = [];
  const add = (name: string, value: string | number | boolean) => parts.push(`${name}=${queryEscape(String(value))}`);
  const capped = (batch: number) => (set(k.maxBatch) ? Math.min(batch, k.maxBatch) : batch);
  const common = () => {
    add("wait", k.wait);
    add("timeout", Math.max(0, Math.round(k.timeoutMillis)));
    if (k.group) add("consumerGroup", k.group);
  };
  if (!on) {
    add("batch", capped(batchSet ? k.batch! : 1));
    common();
    if (partsSet && k.partitions! > 1) add("partitions", k.partitions!);
  } else if (batchSet && (k.partitionRoute || partsSet)) {
    add("batch", capped(k.batch!));
    common();
    if (partsSet) add("partitions", k.partitions!);
  } else {
    add("autopilot", true);
    if (batchSet) add("batch", capped(k.batch!));
    else if (set(k.maxBatch)) add("batch", Math.min(AUTOPILOT_BATCH, k.maxBatch));
    common();
    if (partsSet) add("partitions", k.partitions!);
  }
  if (k.leaseSeconds !== undefined && k.leaseSeconds > 0) add("leaseSeconds", k.leaseSeconds);
  if (k.subscriptionMode) add("subscriptionMode", k.subscriptionMode);
  if (k.subscriptionFrom) add("subscriptionFrom", k.subscriptionFrom);
  if (k.serverAutoAck !== undefined) add("autoAck", k.serverAutoAck);
  if (k.namespace) add("namespace", k.namespace);
  if (k.task) add("task", k.task);
  return parts.join("&");
}
