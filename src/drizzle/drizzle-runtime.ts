import type { is } from 'drizzle-orm';
import type {
  NodePgDatabase,
  NodePgSession,
  NodePgTransaction,
} from 'drizzle-orm/node-postgres';
import type { PgDialect } from 'drizzle-orm/pg-core';
import { loadRequiredPeer } from '../core/optional-peer.js';

/**
 * @internal What the adapter takes of drizzle-orm at run time. It is
 * imported when the adapter is made (`IdempotencyModule.forRoot({ adapter
 * })`), so that the `nestjs-idempotency/drizzle` entry loads nothing of
 * Drizzle by itself.
 */
export interface DrizzleRuntime {
  /** drizzle-orm's check of an object's kind, whatever its copy. */
  readonly is: typeof is;
  readonly NodePgDatabase: typeof NodePgDatabase;
  readonly NodePgSession: typeof NodePgSession;
  readonly NodePgTransaction: typeof NodePgTransaction;
  readonly PgDialect: typeof PgDialect;
}

/**
 * @internal Imports drizzle-orm and its node-postgres driver.
 * @throws IdempotencyConfigurationError when drizzle-orm is not installed.
 */
export async function loadDrizzleRuntime(): Promise<DrizzleRuntime> {
  const problem =
    'DrizzleIdempotencyAdapter needs drizzle-orm, which is not installed.';
  const [core, nodePg, pgCore] = await Promise.all([
    loadRequiredPeer('drizzle-orm', () => import('drizzle-orm'), problem),
    loadRequiredPeer(
      'drizzle-orm/node-postgres',
      () => import('drizzle-orm/node-postgres'),
      problem,
    ),
    loadRequiredPeer(
      'drizzle-orm/pg-core',
      () => import('drizzle-orm/pg-core'),
      problem,
    ),
  ]);
  return {
    is: core.is,
    NodePgDatabase: nodePg.NodePgDatabase,
    NodePgSession: nodePg.NodePgSession,
    NodePgTransaction: nodePg.NodePgTransaction,
    PgDialect: pgCore.PgDialect,
  };
}
