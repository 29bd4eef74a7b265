import {
  Global,
  Inject,
  Injectable,
  Module,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { testPool } from '../utils/test-pool.js';
import { IdempotencyContext } from '../../src/index.js';
import {
  DrizzleIdempotencyAdapter,
  type DrizzleTransaction,
} from '../../src/drizzle/index.js';
import { PaymentsWriter, type AdapterFixture } from './adapter-fixture.js';
import {
  DRIZZLE,
  ledgerEntries,
  payments,
  paymentsSchema,
  type PaymentsDb,
} from './drizzle.schema.js';

/** The payments handler's statements with Drizzle's query builder. */
@Injectable()
class DrizzlePaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<
      DrizzleTransaction<PaymentsDb>
    >,
  ) {}

  async insertPayment(
    key: string,
    amount: number,
    chargeId: string | null = null,
  ): Promise<number> {
    const [{ id }] = await this.idempotency.transaction
      .insert(payments)
      .values({ key, amount, chargeId })
      .returning({ id: payments.id });
    return id;
  }

  async insertLedger(
    paymentId: number,
    amount: number,
    account: string | null = null,
  ): Promise<void> {
    await this.idempotency.transaction
      .insert(ledgerEntries)
      .values({ paymentId, account, amount });
  }

  async backendPid(): Promise<number> {
    const { rows } = await this.idempotency.transaction.execute<{
      pid: number;
    }>(sql`SELECT pg_backend_pid() AS pid`);
    return rows[0].pid;
  }

  async raw(text: string): Promise<void> {
    await this.idempotency.transaction.execute(sql.raw(text));
  }
}

/** Ends the application's pool with the application. */
class DrizzleCloser implements OnApplicationShutdown {
  constructor(@Inject(DRIZZLE) private readonly db: PaymentsDb) {}

  onApplicationShutdown(): Promise<void> {
    return this.db.$client.end();
  }
}

/**
 * The application's Drizzle database on a pool of 5 connections to `url`,
 * under {@link DRIZZLE} (global, for the handlers' modules and
 * nestjs-cls's plugin), with the payments schema.
 */
export function drizzleModule(url: string) {
  @Global()
  @Module({
    providers: [
      {
        provide: DRIZZLE,
        useFactory: (): PaymentsDb =>
          drizzle({ client: testPool(url), schema: paymentsSchema }),
      },
      DrizzleCloser,
    ],
    exports: [DRIZZLE],
  })
  class DrizzleModule {}
  return DrizzleModule;
}

/** Drizzle on node-postgres: a Drizzle database provider. */
export const drizzleFixture: AdapterFixture = {
  name: 'drizzle',
  setUp(url) {
    return {
      imports: [drizzleModule(url)],
      providers: [{ provide: PaymentsWriter, useClass: DrizzlePaymentsWriter }],
      adapter: new DrizzleIdempotencyAdapter<PaymentsDb>({
        drizzleInstanceToken: DRIZZLE,
      }),
    };
  },
  poolOf: (app) => app.get<PaymentsDb>(DRIZZLE).$client,
};
