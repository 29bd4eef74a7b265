import {
  Inject,
  Injectable,
  type OnApplicationShutdown,
  type Provider,
} from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import pg from 'pg';
import type { DataSource } from 'typeorm';

/**
 * Injection token of the `pg` pool that a bench application's handler
 * writes through (and the idempotency module, on PostgreSQL): the one
 * {@link PoolGauge} watches.
 */
export const BENCH_POOL = Symbol('BENCH_POOL');

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

/** Ends the application's own pool with the application. */
@Injectable()
class PoolCloser implements OnApplicationShutdown {
  constructor(@Inject(BENCH_POOL) private readonly pool: pg.Pool) {}

  onApplicationShutdown(): Promise<void> {
    return this.pool.end();
  }
}

/**
 * A pool of the application's own, as an application without TypeORM
 * makes it: on `DATABASE_URL`, of `DATABASE_POOL_SIZE` connections (10 by
 * default, as the sample's DataSource), ended with the application.
 */
export const OWN_POOL: Provider[] = [
  {
    provide: BENCH_POOL,
    useFactory: () =>
      new pg.Pool({
        connectionString: process.env.DATABASE_URL,
        max: Number(process.env.DATABASE_POOL_SIZE ?? 10),
      }),
  },
  PoolCloser,
];
