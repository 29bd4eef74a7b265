/**
 * @internal The message of `error` for a log line: its `message` when it has
 * one (an `Error`, or an object like one), else the value as a string.
 * JavaScript throws any value, and a hook, a store or a handler of the
 * application's may throw `undefined`: reading `.message` of that would
 * throw in the module's own error path.
 */
export function messageOf(error: unknown): string {
  const message = (error as { message?: unknown } | null | undefined)?.message;
  if (typeof message === 'string') {
    return message;
  }
  try {
    return String(error);
  } catch {
    return Object.prototype.toString.call(error);
  }
}
