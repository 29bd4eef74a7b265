import type { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';

const STORE_METHODS = [
  'claim',
  'renew',
  'complete',
  'release',
  'bind',
  'notify',
  'watch',
  'readStep',
  'saveStep',
  'collect',
] as const;

/** @internal Whether `value` has the methods of an {@link IdempotencyStore}. */
export function isIdempotencyStore(value: unknown): value is IdempotencyStore {
  return (
    typeof value === 'object' &&
    value !== null &&
    STORE_METHODS.every(
      (method) =>
        typeof (value as Record<string, unknown>)[method] === 'function',
    )
  );
}
