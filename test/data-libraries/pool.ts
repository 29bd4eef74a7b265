import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type Provider,
} from '@nestjs/common';
import pg from 'pg';
import { poolSettings } from '../../sample-app/pool-settings.js';

const logger = new Logger('Pool');

/**
 * Injection token of the application's `pg` pool that a data library's
 * client is built on (and the idempotency module's adapter, where it takes
 * the pool).
 */
export const POOL = Symbol('POOL');

/** Ends the application's own pool with the application. */
@Injectable()
class PoolCloser implements OnApplicationShutdown {
  constructor(@Inject(POOL) private readonly pool: pg.Pool) {}

  onApplicationShutdown(): Promise<void> {
    return this.pool.end();
  }
}

/**
 * A pool of the application's own, as an application without TypeORM
 * makes it: on `DATABASE_URL`, of `DATABASE_POOL_SIZE` connections (10 by
 * default, as the sample's DataSource), idle ones closed after
 * `DATABASE_POOL_IDLE_MS` (pg's 10 s by default, as the sample's), ended with the application, its
 * idle connections' errors logged (as TypeORM does with its pool's). Its
 * connections are named by `PGAPPNAME`, as node-postgres reads it.
 */
export const OWN_POOL: Provider[] = [
  {
    provide: POOL,
    useFactory: () => {
      const pool = new pg.Pool({
        connectionString: process.env.DATABASE_URL,
        ...poolSettings(),
      });
      // An idle connection the server ended (a restart, a terminated
      // backend) is an 'error' of the pool, which would end the process
      // unheard; the pool drops the connection and opens another.
      pool.on('error', (error) =>
        logger.warn(`Idle connection lost: ${error.message}`),
      );
      return pool;
    },
  },
  PoolCloser,
];
