// Logger plumbing: the client takes any object with console-like methods (console, pino,
// winston all fit); missing methods are silent. Without one, warnings and errors go to the
// console (a consumer's errors with no onError must not vanish); `logger: null` silences all.

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
}

const CLIENT_LOG_ON = /^(1|true|yes|on|debug)$/i;

export function makeLog(logger: Logger | undefined | null, env: Record<string, string | undefined>): Log {
  // `logger: null` wins over LANES_CLIENT_LOG (`??` alone would treat null as absent).
  const target: Logger | undefined =
    logger === null ? undefined : (logger ?? (CLIENT_LOG_ON.test(env.LANES_CLIENT_LOG?.trim() ?? "") ? console : undefined));
  // Warnings and errors reach the console unless a logger was given or `logger: null` silenced them.
  const warnTo = logger === null ? undefined : (target ?? console);
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
  return { debug: call("debug"), info: call("info"), warn: call("warn", warnTo), error: call("error", warnTo) };
}
