import { hash } from 'node:crypto';
import type { IdempotencyTelemetryKeys } from '../interfaces/idempotency-module-options.interface.js';
import type { ExecutorOptions } from './executor.options.js';

/**
 * @internal The first 16 hex digits of the sha256 of a key, as
 * `echo -n "$KEY" | sha256sum | cut -c1-16` prints them: what spans carry
 * as `idempotency.key.hash` and log lines as `key_hash`.
 */
export function keyHash(key: string): string {
  return hash('sha256', key, 'hex').slice(0, 16);
}

/**
 * @internal How the module's log lines show an idempotency key and its
 * scope: as spans do, by telemetry's `keys` option (`'hash'` by default,
 * also with `telemetry: false`, which turns spans off, not the logs). One
 * place, so that no line of a store or a transport shows a key otherwise.
 */
export class LogKeys {
  /** Telemetry's `keys`, or its default when telemetry is off. */
  readonly mode: IdempotencyTelemetryKeys;

  constructor(options: Pick<ExecutorOptions, 'telemetry'>) {
    this.mode = options.telemetry ? options.telemetry.keys : 'hash';
  }

  /**
   * The logfmt fields of a key: `scope="…" key="…"` (`'raw'`),
   * `key_hash=…` (`'hash'`), none (`'none'`, or no key). The scope goes
   * with the raw key only: it may be a user or tenant id.
   */
  fields(scope: string | undefined, key: string | undefined): string[] {
    if (key === undefined || this.mode === 'none') {
      return [];
    }
    if (this.mode === 'raw') {
      return [
        ...(scope === undefined ? [] : [`scope=${JSON.stringify(scope)}`]),
        `key=${JSON.stringify(key)}`,
      ];
    }
    return [`key_hash=${keyHash(key)}`];
  }

  /**
   * A key in a sentence: `key "invoice:42"` (`'raw'`),
   * `key with hash 1a2b3c4d5e6f7a8b` (`'hash'`), `the key` (`'none'`).
   */
  phrase(key: string): string {
    switch (this.mode) {
      case 'raw':
        return `key ${JSON.stringify(key)}`;
      case 'hash':
        return `key with hash ${keyHash(key)}`;
      default:
        return 'the key';
    }
  }
}
