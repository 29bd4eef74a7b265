import type { ModuleMetadata } from '@nestjs/common';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import type { AdapterFixture } from './adapter-fixture.js';
import type { AdapterApp } from './adapter-app.js';

/** `fixture` with `modules` added to its application. */
export function withModules(
  fixture: AdapterFixture,
  ...modules: NonNullable<ModuleMetadata['imports']>
): AdapterFixture {
  return {
    ...fixture,
    setUp(url) {
      const base = fixture.setUp(url);
      return { ...base, imports: [...(base.imports ?? []), ...modules] };
    },
  };
}

/**
 * Sends requests to the application of `target`, and reads what they left
 * in its database.
 */
export function reader(target: () => AdapterApp) {
  return {
    post: (path: string, key: string, body: Record<string, unknown>) =>
      fetch(`${target().url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify(body),
      }),
    /** The keys of the payments whose key starts with `prefix`, by id. */
    payments: async (prefix: string) =>
      (
        await target().db.query<{ key: string }>(
          'SELECT key FROM payments WHERE starts_with(key, $1) ORDER BY id',
          [prefix],
        )
      ).map((row) => row.key),
    /** The amounts of the ledger entries of the payment `key`, by id. */
    ledger: async (key: string) =>
      (
        await target().db.query<{ amount: number }>(
          `SELECT l.amount FROM ledger_entries l JOIN payments p ON p.id = l.payment_id
           WHERE p.key = $1 ORDER BY l.id`,
          [key],
        )
      ).map((row) => row.amount),
    /** The record of `key`. */
    record: async (key: string) =>
      (
        await target().db.query<{ status: string }>(
          `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [key],
        )
      )[0],
  };
}
