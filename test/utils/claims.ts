import type { INestApplication } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdempotencyStore } from '../../src/index.js';
import type { ClaimOutcome, ClaimRequest } from '../../src/stores/index.js';
import { until } from './barrier.js';
import type { TestDatabase } from './test-database.js';

/** What the claims of an application answered, as they answer. */
export interface ClaimWatch {
  /**
   * Resolves once `count` distinct attempts (a request, a message, a run)
   * claiming `key` were answered `state`: for `'in_progress'`, that many
   * duplicates found the key held (and, in wait mode, wait for it now).
   */
  reached(
    key: string,
    state: ClaimOutcome['state'],
    count: number,
  ): Promise<void>;
  /** The distinct attempts at `key` answered `state` so far. */
  count(key: string, state: ClaimOutcome['state']): number;
  /** Stops watching. */
  restore(): void;
}

/**
 * Watches the claims the application's module makes (its store's `claim`):
 * a test waits until its duplicates have found a key held, instead of
 * sleeping, whatever they do then (wait, or get 409 or 422).
 */
export function watchClaims(app: INestApplication): ClaimWatch {
  const store = app.get<IdempotencyStore>(IdempotencyStore);
  const original = store.claim;
  const seen = new Map<string, Set<string>>();
  store.claim = async (request: ClaimRequest) => {
    const outcome = await original.call(store, request);
    const id = `${request.key}\u001f${outcome.state}`;
    seen.set(id, (seen.get(id) ?? new Set()).add(request.owner));
    return outcome;
  };
  const count = (key: string, state: ClaimOutcome['state']) =>
    seen.get(`${key}\u001f${state}`)?.size ?? 0;
  return {
    count,
    reached: (key, state, wanted) =>
      until(
        () => Promise.resolve(count(key, state) >= wanted),
        `${wanted} claim(s) of key ${key} answered ${state}`,
      ),
    restore: () => {
      store.claim = original;
    },
  };
}

/**
 * Takes the claim of `key` over, as another instance does once its lease has
 * run out: its lease is ended, and the same request claims the key with an
 * owner of its own, in one transaction (no renewal slips in between).
 * @returns the new owner.
 */
export async function takeOver(
  url: string,
  key: string,
  scope = 'global',
): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{
      fingerprint: string;
      method: string;
      path: string;
    }>(
      `UPDATE idempotency_records SET lease_expires_at = now() - interval '1 millisecond'
       WHERE scope = $1 AND key = $2 AND status = 'in_progress'
       RETURNING fingerprint, method, path`,
      [scope, key],
    );
    if (rows.length !== 1) {
      throw new Error(`No claim in progress of key ${key} to take over`);
    }
    const owner = randomUUID();
    const { rows: claimed } = await client.query<{ acquired: boolean }>(
      `SELECT acquired FROM idempotency_acquire_generation($1, $2, $3, $4, $5, $6, NULL, 60000, 60000, false)`,
      [scope, key, rows[0].fingerprint, rows[0].method, rows[0].path, owner],
    );
    if (!claimed[0].acquired) {
      throw new Error(`The claim of key ${key} could not be taken over`);
    }
    await client.query('COMMIT');
    return owner;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
}

/** A key held by a running attempt, as its record shows it. */
export interface ClaimInProgress {
  readonly key: string;
  /** The attempt holding it (`owner`). */
  readonly owner: string;
  /** The instance the attempt runs on (`owner_instance`), if it has a presence. */
  readonly instance: string | null;
  /** Whether its lease runs yet. */
  readonly leased: boolean;
}

/** The records in progress of the database of `db`, ordered by key. */
export function claimsInProgress(db: TestDatabase): Promise<ClaimInProgress[]> {
  return db.query<ClaimInProgress>(
    `SELECT key, owner::text AS owner, owner_instance::text AS instance,
            lease_expires_at > now() AS leased
     FROM idempotency_records WHERE status = 'in_progress' ORDER BY key`,
  );
}
