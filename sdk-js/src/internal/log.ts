// Logger plumbing: the client takes any object with console-like methods (console, pino,
// winston all fit); missing methods are silent.

/** Logger receives the SDK's log lines. `console` fits; so do pino and winston loggers. */
export interface Logger {
  debug?(message: string, details?: Record<string, unknown>): void;
  info?(message: string, details?: Record<string, unknown>): void;
  warn?(message: string, details?: Record<string, unknown>): void;
  error?(message: string, details?: Record<string, unknown>): void;
}

/** Log is the internal, always-callable view of a Logger. */
export interface Log {
  debug(message: string, details?: Record<string, unknown>): void;
  info(message: string, details?: Record<string, unknown>): void;
  warn(message: string, details?: Record<string, unknown>): void;
  error(message: string, details?: Record<string, unknown>): void;
  /** lost reports lost messages at error level; with no logger configured it goes to console (only `logger: null` silences it). */
  lost(message: string, details?: Record<string, unknown>): void;
}

export function makeLog(logger: Logger | undefined | null, env: Record<string, string | undefined>): Log {
  const target: Logger | undefined =
    logger ?? (/^(1|true|yes|on|debug)$/i.test(env.LANES_CLIENT_LOG?.trim() ?? "") ? console : undefined);
  const call = (level: keyof Logger, to: Logger | undefined = target) => (message: string, details?: Record<string, unknown>) => {
    const fn = to?.[level];
    if (!fn) return;
    try {
      if (details === undefined) fn.call(to, `lanes: ${message}`);
      else fn.call(to, `lanes: ${message}`, details);
    } catch {
      // A broken logger never breaks the client.
    }
  };
  const lostTo = logger === null ? undefined : (target ?? console);
  return { debug: call("debug"), info: call("info"), warn: call("warn"), error: call("error"), lost: call("error", lostTo) };
}
