import { fingerprintLine } from './redis-record.js';

/** @internal A step as read back from its stored value. */
export interface RedisStep {
  /** When it expires (ms since the epoch, the saving instance's clock). */
  readonly expiresAt: number;
  /** The fingerprint of the request that saved it, if the value has one. */
  readonly fingerprint: string | undefined;
  readonly result: unknown;
}

/**
 * @internal A step's stored value (a field of its key's steps hash): its
 * expiry (ms since the epoch), a space, the fingerprint of the request
 * that saved it (JSON), a newline, its JSON.
 */
export function stepValue(
  expiresAt: number,
  fingerprint: string,
  result: unknown,
): string {
  return `${expiresAt} ${fingerprintLine(fingerprint)}\n${JSON.stringify(result ?? null)}`;
}

/**
 * @internal Reads a step's stored value. One saved by the previous version
 * of the store is its expiry, a space and its JSON, without a fingerprint
 * (JSON never holds a raw newline): its `fingerprint` is undefined, so that
 * any request of its key still reads the steps such a store left in Redis.
 */
export function parseStep(value: string): RedisStep {
  const at = value.indexOf(' ');
  const line = value.indexOf('\n', at + 1);
  return {
    expiresAt: Number(value.slice(0, at)),
    fingerprint:
      line < 0 ? undefined : (JSON.parse(value.slice(at + 1, line)) as string),
    result: JSON.parse(value.slice(line < 0 ? at + 1 : line + 1)) as unknown,
  };
}
