import type { Pool } from 'pg';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';

/** An isolation level as Prisma names it (`Prisma.TransactionIsolationLevel`). */
export type PrismaIsolationLevel =
  'ReadUncommitted' | 'ReadCommitted' | 'RepeatableRead' | 'Serializable';

/** Options of an interactive transaction of Prisma (`$transaction(fn, options)`). */
export interface PrismaTransactionOptions {
  /** How long Prisma waits for the transaction to begin (ms). */
  readonly maxWait?: number;
  /** How long it may stay open before Prisma rolls it back (ms). */
  readonly timeout?: number;
  readonly isolationLevel?: PrismaIsolationLevel;
}

/**
 * What the module uses of the application's `PrismaClient`, whichever
 * `prisma generate` made it, extended or not: its interactive transactions.
 */
export interface PrismaClientLike {
  $transaction(
    fn: (tx: unknown) => Promise<unknown>,
    options?: PrismaTransactionOptions,
  ): Promise<unknown>;
}

/**
 * The handle of an interactive transaction of the PrismaClient type
 * `Client`, as its `$transaction(async (tx) => ...)` gives it: the client's
 * model delegates and raw queries, without `$connect` and its like. The
 * type of `IdempotencyContext<PrismaTransaction<PrismaClient>>.transaction`.
 *
 * @example
 * import { PrismaClient } from './generated/prisma/client.js';
 * constructor(private readonly idempotency: IdempotencyContext<PrismaTransaction<PrismaClient>>) {}
 * await this.idempotency.transaction.payment.create({ data: { amount } });
 */
export type PrismaTransaction<Client extends PrismaClientLike> = Parameters<
  Parameters<Client['$transaction']>[0]
>[0];

const PRISMA_LEVELS: Record<IdempotencyIsolationLevel, PrismaIsolationLevel> = {
  'READ UNCOMMITTED': 'ReadUncommitted',
  'READ COMMITTED': 'ReadCommitted',
  'REPEATABLE READ': 'RepeatableRead',
  SERIALIZABLE: 'Serializable',
};

/** @internal Prisma's `level` as PostgreSQL names it. */
export function sqlLevel(level: PrismaIsolationLevel): string {
  for (const [sql, prisma] of Object.entries(PRISMA_LEVELS)) {
    if (prisma === level) {
      return sql;
    }
  }
  return String(level);
}

/** @internal `level` as Prisma names it. */
export function prismaLevel(
  level: IdempotencyIsolationLevel,
): PrismaIsolationLevel {
  return PRISMA_LEVELS[level];
}

/**
 * What a PrismaClient (Prisma 7) keeps of its options as `_engineConfig`,
 * not in its typings: the driver adapter's factory it was given (here
 * `PrismaPg` of `@prisma/adapter-pg`, which keeps the pool it was given as
 * `externalPool`, a private field), and its default transaction options.
 */
interface PrismaInternals {
  readonly _engineConfig?: {
    readonly adapter?: {
      readonly adapterName?: string;
      readonly externalPool?: Pool | null;
    };
    readonly transactionOptions?: { readonly isolationLevel?: string };
  };
}

/** The name `@prisma/adapter-pg` gives its driver adapter. */
export const PRISMA_PG = '@prisma/adapter-pg';

/**
 * @internal The driver adapter `prisma` runs on, as far as the module can
 * tell: its name, and the pg `Pool` it was given (`new PrismaPg(pool)`);
 * `undefined` where the client keeps neither where Prisma 7 does.
 */
export function prismaDriver(
  prisma: PrismaClientLike,
): { readonly name?: string; readonly pool?: Pool } | undefined {
  const adapter = (prisma as PrismaInternals)._engineConfig?.adapter;
  return adapter
    ? { name: adapter.adapterName, pool: adapter.externalPool ?? undefined }
    : undefined;
}

/**
 * @internal The isolation level of `prisma`'s transactions when they are
 * given none (its `transactionOptions.isolationLevel`), as PostgreSQL
 * names it; `undefined`: the server's default.
 */
export function prismaDefaultLevel(
  prisma: PrismaClientLike,
): IdempotencyIsolationLevel | undefined {
  const level = (prisma as PrismaInternals)._engineConfig?.transactionOptions
    ?.isolationLevel;
  return (Object.keys(PRISMA_LEVELS) as IdempotencyIsolationLevel[]).find(
    (name) => PRISMA_LEVELS[name] === level,
  );
}
