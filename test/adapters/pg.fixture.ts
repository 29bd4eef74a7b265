import {
  Inject,
  Injectable,
  Module,
  type OnApplicationShutdown,
} from '@nestjs/common';
import pg from 'pg';
import { testPool } from '../utils/test-pool.js';
import { IdempotencyContext } from '../../src/index.js';
import {
  PgIdempotencyAdapter,
  type PgTransaction,
} from '../../src/pg/index.js';
import { PaymentsWriter, type AdapterFixture } from './adapter-fixture.js';

export const PG_POOL = Symbol('PG_POOL');

/** The payments handler's statements on node-postgres. */
@Injectable()
class PgPaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<PgTransaction>,
  ) {}

  async insertPayment(
    key: string,
    amount: number,
    chargeId: string | null = null,
  ): Promise<number> {
    const { rows } = await this.idempotency.transaction.query<{ id: number }>(
      'INSERT INTO payments (key, amount, charge_id) VALUES ($1, $2, $3) RETURNING id',
      [key, amount, chargeId],
    );
    return rows[0].id;
  }

  async insertLedger(
    paymentId: number,
    amount: number,
    account: string | null = null,
  ): Promise<void> {
    await this.idempotency.transaction.query(
      'INSERT INTO ledger_entries (payment_id, account, amount) VALUES ($1, $2, $3)',
      [paymentId, account, amount],
    );
  }

  async backendPid(): Promise<number> {
    const { rows } = await this.idempotency.transaction.query<{
      pid: number;
    }>('SELECT pg_backend_pid() AS pid');
    return rows[0].pid;
  }

  async raw(sql: string): Promise<void> {
    await this.idempotency.transaction.query(sql);
  }
}

/** The application's pool, ended with the application. */
class PoolCloser implements OnApplicationShutdown {
  constructor(@Inject(PG_POOL) private readonly pool: pg.Pool) {}

  onApplicationShutdown(): Promise<void> {
    return this.pool.end();
  }
}

/** node-postgres alone: a `pg.Pool` provider. */
export const pgFixture: AdapterFixture = {
  name: 'pg',
  setUp(url) {
    @Module({
      providers: [
        {
          provide: PG_POOL,
          useFactory: () => testPool(url),
        },
        PoolCloser,
      ],
      exports: [PG_POOL],
    })
    class PgModule {}
    return {
      imports: [PgModule],
      providers: [{ provide: PaymentsWriter, useClass: PgPaymentsWriter }],
      adapter: new PgIdempotencyAdapter({ poolToken: PG_POOL }),
    };
  },
  poolOf: (app) => app.get<pg.Pool>(PG_POOL),
};
