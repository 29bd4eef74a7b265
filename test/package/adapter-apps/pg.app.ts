/*
 * An application on node-postgres alone, outside the repository
 * (adapter-apps.e2e-spec.ts): no TypeORM installed.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyContext, IdempotencyModule } from 'nestjs-idempotency';
import {
  PgIdempotencyAdapter,
  type PgTransaction,
} from 'nestjs-idempotency/pg';
import { appPool, PaymentsController, PaymentsWriter } from './payments.js';

const PG_POOL = Symbol('PG_POOL');

@Injectable()
class PgPaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<PgTransaction>,
  ) {}

  async insertPayment(key: string, amount: number): Promise<number> {
    const { rows } = await this.idempotency.transaction.query<{ id: number }>(
      'INSERT INTO payments (key, amount) VALUES ($1, $2) RETURNING id',
      [key, amount],
    );
    return rows[0].id;
  }

  async insertLedger(paymentId: number, amount: number): Promise<void> {
    await this.idempotency.transaction.query(
      'INSERT INTO ledger_entries (payment_id, amount) VALUES ($1, $2)',
      [paymentId, amount],
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

@Module({
  imports: [
    IdempotencyModule.forRoot({
      adapter: new PgIdempotencyAdapter({ poolToken: PG_POOL }),
    }),
  ],
  controllers: [PaymentsController],
  providers: [
    {
      provide: PG_POOL,
      useFactory: appPool,
    },
    { provide: PaymentsWriter, useClass: PgPaymentsWriter },
  ],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: ['error'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
console.log(`library: ${import.meta.resolve('nestjs-idempotency')}`);
console.log(`listening: ${await app.getUrl()}`);
