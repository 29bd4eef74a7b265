/**
 * An application of the compiled library (`nestjs-idempotency`, resolved to
 * this repository's dist/), in plain JavaScript, on the in-memory store and
 * without TypeORM, started by test/utils/hidden-packages.js. It prints
 * `cjs: <files of typeorm or pg that require() loaded>`, then
 * `listening: <base URL>` once it accepts requests.
 */
import 'reflect-metadata';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  IdempotencyContext,
  IdempotencyModule,
  Idempotent,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';

class PaymentsController {
  constructor(idempotency) {
    this.idempotency = idempotency;
  }

  async create(body) {
    const charge = await this.idempotency.step('charge', () => ({
      id: randomUUID(),
    }));
    // Another on every execution: a replay returns this very one.
    return { reference: body.reference, charge, receipt: randomUUID() };
  }
}

// Without a TypeScript compiler, decorators are applied by calling them.
const proto = PaymentsController.prototype;
const create = () => Object.getOwnPropertyDescriptor(proto, 'create');
Reflect.defineMetadata(
  'design:paramtypes',
  [IdempotencyContext],
  PaymentsController,
);
Body()(proto, 'create', 0);
Idempotent()(proto, 'create', create());
Post()(proto, 'create', create());
Controller('payments')(PaymentsController);

class AppModule {}
Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
  controllers: [PaymentsController],
})(AppModule);

const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
const required = Object.keys(createRequire(import.meta.url).cache).filter(
  (file) => /\/node_modules\/(typeorm|@nestjs\/typeorm|pg)\//.test(file),
);
console.log(`cjs: ${JSON.stringify(required)}`);
console.log(`listening: ${await app.getUrl()}`);
