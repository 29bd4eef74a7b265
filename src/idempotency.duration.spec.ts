import { toMilliseconds } from './idempotency.duration.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';

describe('toMilliseconds', () => {
  it.each([
    [1500, 1500],
    ['500ms', 500],
    ['30s', 30_000],
    ['1.5m', 90_000],
    ['24h', 86_400_000],
    ['7d', 604_800_000],
  ])('reads %p as %p ms', (value, expected) => {
    expect(toMilliseconds(value, 'ttl')).toBe(expected);
  });

  it.each([0, -1, Number.NaN, Infinity, '', '10', '5 weeks', 'soon', '0s'])(
    'refuses %p with a configuration error naming the option',
    (value) => {
      expect(() => toMilliseconds(value, 'waitTimeout')).toThrow(
        IdempotencyConfigurationError,
      );
      expect(() => toMilliseconds(value, 'waitTimeout')).toThrow(
        /"waitTimeout"/,
      );
    },
  );
});
