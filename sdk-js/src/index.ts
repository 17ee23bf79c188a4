// Placeholder entry point for @lanesmq/lanes; the SDK replaces it with the
// fluent client. For now it re-exports the types generated from openapi.yaml.
export type { components, operations, paths } from "./generated/schema.js";

/** Default broker URL of a local `make run`. */
export const DEFAULT_URL = "http://localhost:6632";
