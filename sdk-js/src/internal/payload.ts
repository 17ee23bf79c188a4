// What a push payload, a KV value or a timer payload may hold: values JSON.stringify sends as
// they are. Everything it would throw on, or silently change (NaN → null, a Map → {}, a
// Uint8Array → an object of indices, undefined in an array → null), is refused before sending,
// so a value is stored exactly as given or not at all.

/** jsonProblem returns why value is not plain JSON (with the path to the bad part, starting at `name`), or undefined when it is. */
export function jsonProblem(value: unknown, name = "payload", opts: { bigint?: boolean } = {}): string | undefined {
  return walk(value, name, new Set(), false, opts.bigint === true);
}

// bigint: the value goes to a KV route, which writes a bigint as its digits (losslessjson.ts).
function walk(value: unknown, path: string, ancestors: Set<object>, inArray: boolean, bigint: boolean): string | undefined {
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined;
    case "number":
      return Number.isFinite(value) ? undefined : `${path} is ${value}, which JSON cannot hold`;
    case "bigint":
      return bigint ? undefined : `${path} is a BigInt, which JSON cannot hold (send it as a string)`;
    case "function":
    case "symbol":
      return `${path} is a ${typeof value}, which JSON cannot hold`;
    case "undefined":
      // JSON.stringify leaves it out of objects, as everywhere in JS, but an array cannot leave
      // out an element: it would store null (a hole in a sparse array reads as undefined too).
      return inArray ? `${path} is undefined, which JSON would store as null (use null)` : undefined;
  }
  if (value === null) return undefined;
  const obj = value as object;
  if (ArrayBuffer.isView(obj) || obj instanceof ArrayBuffer) {
    return `${path} is binary data, which JSON cannot hold (send base64 or an array of numbers)`;
  }
  if (obj instanceof Map || obj instanceof Set) return `${path} is a ${obj.constructor.name}, which JSON would store as {}`;
  const toJSON = (obj as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") return walk((toJSON as () => unknown).call(obj), path, ancestors, inArray, bigint);
  if (ancestors.has(obj)) return `${path} refers back to itself`;
  ancestors.add(obj);
  try {
    if (Array.isArray(obj)) {
      for (let i = 0; i < obj.length; i++) {
        const p = walk(obj[i], `${path}[${i}]`, ancestors, true, bigint);
        if (p) return p;
      }
      return undefined;
    }
    for (const [k, v] of Object.entries(obj)) {
      const p = walk(v, `${path}.${k}`, ancestors, false, bigint);
      if (p) return p;
    }
    return undefined;
  } finally {
    ancestors.delete(obj);
  }
}
