/**
 * A consumer of the published package, in plain JavaScript (ES modules, no
 * build step). package.e2e-spec.ts copies it as `app.js` into a scratch
 * directory outside the repository, next to a `node_modules` installed from
 * the packed tarball.
 *
 * Without a TypeScript compiler, decorators are applied by calling them, the
 * way the compiler would, and constructor dependencies are named with
 * `Inject`.
 *
 * It prints `library: <resolved URL of nestjs-idempotency>`, then
 * `listening: <base URL>` once it accepts requests.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule, getRepositoryToken } from '@nestjs/typeorm';
import { EntitySchema } from 'typeorm';
import { IdempotencyModule, Idempotent } from 'nestjs-idempotency';
import * as library from 'nestjs-idempotency';
import { idempotencyMigrations } from 'nestjs-idempotency/migrations';

if ('idempotencyMigrations' in library) {
  throw new Error(
    'the main entry point exports the migrations: they belong to nestjs-idempotency/migrations alone',
  );
}

/** The application's own table... */
const Payment = new EntitySchema({
  name: 'Payment',
  tableName: 'payments',
  columns: {
    id: { type: 'int', primary: true, generated: 'increment' },
    reference: { type: 'text' },
    amount: { type: 'int' },
  },
});

/** ...created by the application's own migration. */
class CreatePayments1764000000100 {
  name = 'CreatePayments1764000000100';

  async up(queryRunner) {
    await queryRunner.query(`
      CREATE TABLE "payments" (
        "id" serial PRIMARY KEY,
        "reference" text NOT NULL,
        "amount" integer NOT NULL
      )`);
  }

  async down(queryRunner) {
    await queryRunner.query(`DROP TABLE "payments"`);
  }
}

class PaymentsController {
  constructor(payments) {
    this.payments = payments;
  }

  async create(body) {
    const payment = await this.payments.save(
      this.payments.create({ reference: body.reference, amount: body.amount }),
    );
    // Different on every execution: a replay must return this very receipt.
    return { ...payment, receipt: randomUUID() };
  }
}

const proto = PaymentsController.prototype;
const create = () => Object.getOwnPropertyDescriptor(proto, 'create');
Reflect.defineMetadata('design:paramtypes', [Object], PaymentsController);
Inject(getRepositoryToken(Payment))(PaymentsController, undefined, 0);
Body()(proto, 'create', 0);
Idempotent()(proto, 'create', create());
Post()(proto, 'create', create());
Controller('payments')(PaymentsController);

class AppModule {}
Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Payment],
      migrations: [...idempotencyMigrations, CreatePayments1764000000100],
      migrationsRun: true,
      synchronize: false,
      logging: false,
    }),
    TypeOrmModule.forFeature([Payment]),
    IdempotencyModule.forRoot(),
  ],
  controllers: [PaymentsController],
})(AppModule);

const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
console.log(`library: ${import.meta.resolve('nestjs-idempotency')}`);
console.log(`listening: ${await app.getUrl()}`);
