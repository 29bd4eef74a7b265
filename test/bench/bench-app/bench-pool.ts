import type { Provider } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type pg from 'pg';
import type { DataSource } from 'typeorm';
import { POOL } from '../../data-libraries/pool.js';

/**
 * Injection token of the `pg` pool that a bench application's handler
 * writes through (and the idempotency module, on PostgreSQL): the one
 * {@link PoolGauge} watches. A data library's pool is provided under it
 * (test/data-libraries/pool.ts); TypeORM's under {@link TYPEORM_POOL}.
 */
export const BENCH_POOL = POOL;

/** The pool under `dataSource`, TypeORM's on PostgreSQL. */
export function poolOf(dataSource: DataSource): pg.Pool {
  // TypeORM's PostgreSQL driver keeps its pool in `master` (no replication).
  return (dataSource.driver as unknown as { master: pg.Pool }).master;
}

/** The pool under the application's TypeORM DataSource. */
export const TYPEORM_POOL: Provider = {
  provide: BENCH_POOL,
  useFactory: poolOf,
  inject: [getDataSourceToken()],
};
