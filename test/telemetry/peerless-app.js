/**
 * An application of the compiled library (`nestjs-idempotency`, resolved to
 * this repository's dist/), in plain JavaScript, started by test/utils/hidden-packages.js.
 * `TELEMETRY=off` gives it `telemetry: false`; otherwise the module's
 * default applies.
 *
 * It prints `cjs: <files of @opentelemetry/* that require() loaded>`, then
 * `listening: <base URL>` once it accepts requests.
 */
import 'reflect-metadata';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule, getRepositoryToken } from '@nestjs/typeorm';
import { EntitySchema } from 'typeorm';
import { IdempotencyModule, Idempotent } from 'nestjs-idempotency';
import { idempotencyMigrations } from 'nestjs-idempotency/migrations';

const Payment = new EntitySchema({
  name: 'Payment',
  tableName: 'payments',
  columns: {
    id: { type: 'int', primary: true, generated: 'increment' },
    reference: { type: 'text' },
  },
});

class CreatePayments1764000000100 {
  name = 'CreatePayments1764000000100';

  async up(queryRunner) {
    await queryRunner.query(
      `CREATE TABLE "payments" ("id" serial PRIMARY KEY, "reference" text NOT NULL)`,
    );
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
      this.payments.create({ reference: body.reference }),
    );
    // Another on every execution: a replay returns this very one.
    return { ...payment, receipt: randomUUID() };
  }
}

// Without a TypeScript compiler, decorators are applied by calling them.
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
    IdempotencyModule.forRoot(
      process.env.TELEMETRY === 'off' ? { telemetry: false } : {},
    ),
  ],
  controllers: [PaymentsController],
})(AppModule);

const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
const required = Object.keys(createRequire(import.meta.url).cache).filter(
  (file) => file.includes('/@opentelemetry/'),
);
console.log(`cjs: ${JSON.stringify(required)}`);
console.log(`listening: ${await app.getUrl()}`);
