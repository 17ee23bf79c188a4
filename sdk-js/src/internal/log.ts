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
}

export function makeLog(logger: Logger | undefined | null, env: Record<string, string | undefined>): Log {
  const target: Logger | undefined =
    logger ?? (/^(1|true|yes|on|debug)$/i.test(env.LANES_CLIENT_LOG?.trim() ?? "") ? console : undefined);
  const call = (level: keyof Logger) => (message: string, details?: Record<string, unknown>) => {
    const fn = target?.[level];
    if (!fn) return;
    try {
      if (details === undefined) fn.call(target, `lanes: ${message}`);
      else fn.call(target, `lanes: ${message}`, details);
    } catch {
      // A broken logger never breaks the client.
    }
  };
  return { debug: call("debug"), info: call("info"), warn: call("warn"), error: call("error") };
}
