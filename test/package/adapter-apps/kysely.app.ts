/*
 * An application on Kysely (PostgresDialect), outside the repository
 * (adapter-apps.e2e-spec.ts): no TypeORM installed.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Kysely, PostgresDialect, sql, type Generated } from 'kysely';
import { IdempotencyContext, IdempotencyModule } from 'nestjs-idempotency';
import {
  KyselyIdempotencyAdapter,
  type KyselyTransaction,
} from 'nestjs-idempotency/kysely';
import pg from 'pg';
import { appPool, PaymentsController, PaymentsWriter } from './payments.js';

interface Database {
  payments: { id: Generated<number>; key: string; amount: number };
  ledger_entries: { id: Generated<number>; payment_id: number; amount: number };
}

const KYSELY = Symbol('KYSELY');
const PG_POOL = Symbol('PG_POOL');

@Injectable()
class KyselyPaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<
      KyselyTransaction<Database>
    >,
  ) {}

  async insertPayment(key: string, amount: number): Promise<number> {
    const { id } = await this.idempotency.transaction
      .insertInto('payments')
      .values({ key, amount })
      .returning('id')
      .executeTakeFirstOrThrow();
    return id;
  }

  async insertLedger(paymentId: number, amount: number): Promise<void> {
    await this.idempotency.transaction
      .insertInto('ledger_entries')
      .values({ payment_id: paymentId, amount })
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

@Module({
  imports: [
    IdempotencyModule.forRoot({
      adapter: new KyselyIdempotencyAdapter({
        kyselyToken: KYSELY,
        poolToken: PG_POOL,
      }),
    }),
  ],
  controllers: [PaymentsController],
  providers: [
    {
      provide: PG_POOL,
      useFactory: appPool,
    },
    {
      provide: KYSELY,
      inject: [PG_POOL],
      useFactory: (pool: pg.Pool) =>
        new Kysely<Database>({ dialect: new PostgresDialect({ pool }) }),
    },
    { provide: PaymentsWriter, useClass: KyselyPaymentsWriter },
  ],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: ['error'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
console.log(`library: ${import.meta.resolve('nestjs-idempotency')}`);
console.log(`listening: ${await app.getUrl()}`);
