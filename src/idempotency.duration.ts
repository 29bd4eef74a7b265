import type { IdempotencyDuration } from './interfaces/idempotency-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';

const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * @internal The longest a Node.js timer waits (about 24.8 days): a longer
 * delay fires at once, with a warning.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * @internal Converts a duration option to whole milliseconds.
 * @param maxMs the longest it may be: `MAX_TIMER_MS` for a duration the
 * module waits with a timer (a deadline, a lease's renewals).
 */
export function toMilliseconds(
  value: IdempotencyDuration,
  option: string,
  maxMs = Number.POSITIVE_INFINITY,
): number {
  const ms = parsed(value);
  if (ms !== undefined && ms > maxMs) {
    throw new IdempotencyConfigurationError(
      `Invalid duration for "${option}": ${JSON.stringify(value)} is longer than ${maxMs} ms${maxMs === MAX_TIMER_MS ? ', the longest a Node.js timer waits (a longer one would fire at once)' : ''}.`,
      `Give at most ${maxMs} ms${maxMs === MAX_TIMER_MS ? " ('24d')" : ''}.`,
    );
  }
  if (ms !== undefined) {
    return ms;
  }
  throw new IdempotencyConfigurationError(
    `Invalid duration for "${option}": ${JSON.stringify(value)}.`,
    `Give a positive number of milliseconds or a string such as '500ms', '30s', '15m', '24h' or '7d'.`,
  );
}

/** Whole milliseconds of a duration, or `undefined` when it is not one. */
function parsed(value: IdempotencyDuration): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value) && value > 0) {
    return Math.round(value);
  }
  if (typeof value === 'string') {
    const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(value);
    if (match) {
      const ms = Math.round(Number(match[1]) * UNIT_MS[match[2]]);
      if (ms > 0) {
        return ms;
      }
    }
  }
  return undefined;
}
