/*
 * An application on Drizzle (node-postgres), outside the repository
 * (adapter-apps.e2e-spec.ts): no TypeORM installed.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { IdempotencyContext, IdempotencyModule } from 'nestjs-idempotency';
import {
  DrizzleIdempotencyAdapter,
  type DrizzleTransaction,
} from 'nestjs-idempotency/drizzle';
import { appPool, PaymentsController, PaymentsWriter } from './payments.js';

const payments = pgTable('payments', {
  id: serial('id').primaryKey(),
  key: text('key').notNull(),
  amount: integer('amount').notNull(),
});
const ledgerEntries = pgTable('ledger_entries', {
  id: serial('id').primaryKey(),
  paymentId: integer('payment_id').notNull(),
  amount: integer('amount').notNull(),
});
const schema = { payments, ledgerEntries };
type Db = NodePgDatabase<typeof schema>;

const DRIZZLE = Symbol('DRIZZLE');

@Injectable()
class DrizzlePaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<DrizzleTransaction<Db>>,
  ) {}

  async insertPayment(key: string, amount: number): Promise<number> {
    const [{ id }] = await this.idempotency.transaction
      .insert(payments)
      .values({ key, amount })
      .returning({ id: payments.id });
    return id;
  }

  async insertLedger(paymentId: number, amount: number): Promise<void> {
    await this.idempotency.transaction
      .insert(ledgerEntries)
      .values({ paymentId, amount });
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

@Module({
  imports: [
    IdempotencyModule.forRoot({
      adapter: new DrizzleIdempotencyAdapter<Db>({
        drizzleInstanceToken: DRIZZLE,
      }),
    }),
  ],
  controllers: [PaymentsController],
  providers: [
    {
      provide: DRIZZLE,
      useFactory: (): Db =>
        drizzle({
          client: appPool(),
          schema,
        }),
    },
    { provide: PaymentsWriter, useClass: DrizzlePaymentsWriter },
  ],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: ['error'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
console.log(`library: ${import.meta.resolve('nestjs-idempotency')}`);
console.log(`listening: ${await app.getUrl()}`);
