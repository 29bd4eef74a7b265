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
 * @internal Converts a duration option to whole milliseconds.
 */
export function toMilliseconds(
  value: IdempotencyDuration,
  option: string,
): number {
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
  throw new IdempotencyConfigurationError(
    `Invalid duration for "${option}": ${JSON.stringify(value)}.`,
    `Give a positive number of milliseconds or a string such as '500ms', '30s', '15m', '24h' or '7d'.`,
  );
}
