import { derivedKey } from '../../src/core/derived-key.js';
import type { TestDatabase } from './test-database.js';

/** The shape of a key `IdempotencyContext.deriveKey()` derives: a UUID of version 8. */
export const DERIVED_KEY =
  /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * The generation of a record of the PostgreSQL store, as its claim returns
 * it: its `created_at` in microseconds since the epoch, as text. A column
 * expression of `idempotency_records`.
 */
export const GENERATION_SQL =
  '(extract(epoch FROM created_at) * 1000000)::bigint::text';

/** What of a record of the PostgreSQL store a derived key is made of. */
export interface DerivingRecord {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  /** Read with {@link GENERATION_SQL}. */
  readonly generation: string;
}

/**
 * The key that the request holding `record` derives for its downstream
 * call `name`: its scope, key, fingerprint and generation, as read from its
 * row in `idempotency_records`.
 */
export function derivedKeyOfRecord(
  record: DerivingRecord,
  name = 'charge',
): string {
  const { scope, key, fingerprint, generation } = record;
  return derivedKey({ scope, key, fingerprint, generation, name });
}

/**
 * The key that the request holding `key` (in `scope`, by default any) on the
 * PostgreSQL store derives for its downstream call `name`, from its record:
 * its scope, fingerprint and generation (the record's `created_at`).
 * @throws when no record of `key` exists, or several (in several scopes)
 * and no `scope` was named.
 */
export async function derivedKeyOf(
  db: Pick<TestDatabase, 'query'>,
  key: string,
  name = 'charge',
  scope?: string,
): Promise<string> {
  const rows = await db.query<{
    scope: string;
    fingerprint: string;
    generation: string;
  }>(
    `SELECT scope, fingerprint, ${GENERATION_SQL} AS generation
       FROM idempotency_records
      WHERE key = $1 AND ($2::text IS NULL OR scope = $2)`,
    [key, scope ?? null],
  );
  if (rows.length !== 1) {
    throw new Error(
      `Expected one record of key ${JSON.stringify(key)}${scope === undefined ? '' : ` in scope ${JSON.stringify(scope)}`}, found ${rows.length}`,
    );
  }
  const [row] = rows;
  return derivedKeyOfRecord({ ...row, key }, name);
}
