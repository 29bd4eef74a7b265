import {
  Inject,
  Injectable,
  Module,
  type OnApplicationShutdown,
} from '@nestjs/common';
import {
  Kysely,
  PostgresDialect,
  sql,
  type Generated,
  type KyselyConfig,
} from 'kysely';
import pg from 'pg';
import { testPool } from '../utils/test-pool.js';
import { IdempotencyContext } from '../../src/index.js';
import {
  KyselyIdempotencyAdapter,
  type KyselyTransaction,
} from '../../src/kysely/index.js';
import { PaymentsWriter, type AdapterFixture } from './adapter-fixture.js';

/** The payments tables (see adapter-app.ts), as Kysely types them. */
export interface PaymentsDatabase {
  payments: {
    id: Generated<number>;
    key: string;
    amount: number;
    charge_id: string | null;
  };
  ledger_entries: {
    id: Generated<number>;
    payment_id: number;
    account: string | null;
    amount: number;
  };
}

/** Injection token of the application's Kysely. */
export const KYSELY = Symbol('KYSELY');
/** Injection token of the pool its dialect is given. */
export const KYSELY_POOL = Symbol('KYSELY_POOL');

/** The payments handler's statements on Kysely's typed query builder. */
@Injectable()
class KyselyPaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<
      KyselyTransaction<PaymentsDatabase>
    >,
  ) {}

  async insertPayment(
    key: string,
    amount: number,
    chargeId: string | null = null,
  ): Promise<number> {
    const { id } = await this.idempotency.transaction
      .insertInto('payments')
      .values({ key, amount, charge_id: chargeId })
      .returning('id')
      .executeTakeFirstOrThrow();
    return id;
  }

  async insertLedger(
    paymentId: number,
    amount: number,
    account: string | null = null,
  ): Promise<void> {
    await this.idempotency.transaction
      .insertInto('ledger_entries')
      .values({ payment_id: paymentId, account, amount })
      .execute();
  }

  async backendPid(): Promise<number> {
    const { rows } = await sql<{
      pid: number;
    }>`SELECT pg_backend_pid() AS pid`.execute(this.idempotency.transaction);
    return rows[0].pid;
  }

  async raw(text: string): Promise<void> {
    await sql.raw(text).execute(this.idempotency.transaction);
  }
}

/** The application's pool and Kysely, ended with the application. */
class KyselyCloser implements OnApplicationShutdown {
  constructor(@Inject(KYSELY) private readonly db: Kysely<unknown>) {}

  onApplicationShutdown(): Promise<void> {
    // Ends the dialect's pool too.
    return this.db.destroy();
  }
}

/**
 * The module of a Kysely on `url`, its dialect given a `pg.Pool` of its
 * own provider, with `config` (plugins, log) added.
 */
export function kyselyModule(
  url: string,
  config: Omit<KyselyConfig, 'dialect'> = {},
) {
  @Module({
    providers: [
      {
        provide: KYSELY_POOL,
        useFactory: () => testPool(url),
      },
      {
        provide: KYSELY,
        inject: [KYSELY_POOL],
        useFactory: (pool: pg.Pool) =>
          new Kysely<PaymentsDatabase>({
            ...config,
            dialect: new PostgresDialect({ pool }),
          }),
      },
      KyselyCloser,
    ],
    exports: [KYSELY, KYSELY_POOL],
  })
  class KyselyModule {}
  return KyselyModule;
}

/** Kysely on node-postgres: a `pg.Pool` provider and a `Kysely` provider. */
export const kyselyFixture: AdapterFixture = {
  name: 'kysely',
  setUp(url) {
    return {
      imports: [kyselyModule(url)],
      providers: [{ provide: PaymentsWriter, useClass: KyselyPaymentsWriter }],
      adapter: new KyselyIdempotencyAdapter({
        kyselyToken: KYSELY,
        poolToken: KYSELY_POOL,
      }),
    };
  },
  poolOf: (app) => app.get<pg.Pool>(KYSELY_POOL),
};
