/*
 * An application on Prisma 7 (@prisma/adapter-pg), outside the repository
 * (adapter-apps.e2e-spec.ts): no TypeORM installed. Its client is
 * generated in the application by `prisma generate`, from the schema of
 * test/adapters/prisma/schema.prisma; in the repository, this file
 * type-checks against the client generated there (the test points the
 * import at the application's own).
 */
import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import { IdempotencyContext, IdempotencyModule } from 'nestjs-idempotency';
import {
  PrismaIdempotencyAdapter,
  type PrismaTransaction,
} from 'nestjs-idempotency/prisma';
import pg from 'pg';
import { PrismaClient } from '../../adapters/prisma/generated/client.js';
import { appPool, PaymentsController, PaymentsWriter } from './payments.js';

const PG_POOL = Symbol('PG_POOL');

@Injectable()
class PrismaService extends PrismaClient {
  constructor(@Inject(PG_POOL) pool: pg.Pool) {
    super({ adapter: new PrismaPg(pool) });
  }
}

@Injectable()
class PrismaPaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<
      PrismaTransaction<PrismaService>
    >,
  ) {}

  async insertPayment(key: string, amount: number): Promise<number> {
    const payment = await this.idempotency.transaction.payment.create({
      data: { key, amount },
    });
    return payment.id;
  }

  async insertLedger(paymentId: number, amount: number): Promise<void> {
    await this.idempotency.transaction.ledgerEntry.create({
      data: { paymentId, amount },
    });
  }

  async backendPid(): Promise<number> {
    const [{ pid }] = await this.idempotency.transaction.$queryRaw<
      Array<{ pid: number }>
    >`SELECT pg_backend_pid() AS pid`;
    return pid;
  }

  async raw(sql: string): Promise<void> {
    await this.idempotency.transaction.$executeRawUnsafe(sql);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRoot({
      adapter: new PrismaIdempotencyAdapter({ prismaToken: PrismaService }),
    }),
  ],
  controllers: [PaymentsController],
  providers: [
    {
      provide: PG_POOL,
      useFactory: appPool,
    },
    PrismaService,
    { provide: PaymentsWriter, useClass: PrismaPaymentsWriter },
  ],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: ['error'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
console.log(`library: ${import.meta.resolve('nestjs-idempotency')}`);
console.log(`listening: ${await app.getUrl()}`);
