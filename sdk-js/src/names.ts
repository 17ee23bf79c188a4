// The broker's rule for queue and partition names, checked on the client where a bad name would
// otherwise fill a buffer with items the broker can only refuse, or send a pop to another route
// (URL clients drop a "." or ".." path segment).
import { InvalidNameError } from "./errors.js";

/** MAX_NAME_BYTES is the broker's limit on a queue or partition name (UTF-8 bytes). */
const MAX_NAME_BYTES = 512;

/** LONE_SURROGATE matches a surrogate without its pair (in `u` mode a pair is one code point), which has no UTF-8 form. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/** BLANK matches a name of only the broker's white space: Unicode's White_Space, as Go's unicode.IsSpace. trim() differs: it strips U+FEFF, a name the broker takes, and keeps U+0085, which the broker counts as white space. */
const BLANK = /^\p{White_Space}*$/u;

/** nameProblem says why the broker refuses `value` as a name, or "". */
function nameProblem(value: string): string {
  if (value === "." || value === "..") return 'must not be "." or ".." (URL clients drop such path segments)';
  if (Buffer.byteLength(value, "utf8") > MAX_NAME_BYTES) return `is longer than ${MAX_NAME_BYTES} bytes`;
  if (value.includes("\u0000")) return "must not contain a NUL character";
  if (LONE_SURROGATE.test(value)) return "must be valid UTF-8 (no lone surrogates)";
  return "";
}

/** checkNames throws InvalidNameError (naming `op`) for a queue or partition the broker refuses; an empty or absent partition means "Default". */
export function checkNames(op: string, queue: string, partition: string | undefined): void {
  const queueProblem = BLANK.test(queue) ? "must be a non-empty string" : nameProblem(queue);
  if (queueProblem) throw new InvalidNameError("queue", queue, queueProblem, op);
  const partitionProblem = !partition ? "" : BLANK.test(partition) ? "must hold more than white space" : nameProblem(partition);
  if (partitionProblem) throw new InvalidNameError("partition", partition ?? "", partitionProblem, op);
}

/** checkGroup throws InvalidNameError (naming `op`) for a consumer group name of only white space, which the broker refuses on a pop or seek and would take as a group of its own elsewhere (an ack, a delete). An empty or absent group means no group (queue mode, or every group), except on a route that names the group in its path (`inPath`), where "" would reach another route. */
export function checkGroup(op: string, group: string | null | undefined, inPath = false): void {
  if (!group) {
    if (inPath) throw new InvalidNameError("group", group ?? "", "must be a non-empty string", op);
    return;
  }
  if (BLANK.test(group)) throw new InvalidNameError("group", group, "must hold more than white space", op);
}
