import { derivedKey } from '../../src/core/derived-key.js';
import type { TestDatabase } from './test-database.js';

/** The shape of a key `IdempotencyContext.deriveKey()` derives: a UUID of version 8. */
export const DERIVED_KEY =
  /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

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
    `SELECT scope, fingerprint,
            (extract(epoch FROM created_at) * 1000000)::bigint::text AS generation
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
  return derivedKey({ ...row, key, name });
}
