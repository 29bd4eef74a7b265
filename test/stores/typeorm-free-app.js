/**
 * An application of the compiled library (`nestjs-idempotency`, resolved to
 * this repository's dist/), in plain JavaScript, without TypeORM, started by
 * test/utils/hidden-packages.js or on its own. Its store is the in-memory
 * one, or the one `STORE` names: `redis` (`REDIS_URL`, `REDIS_PREFIX`) or
 * `dynamodb` (`DYNAMODB_ENDPOINT`, its table made by the test); `LEASE` sets
 * the module's lease. With `HOLD=1`, `POST /payments` prints
 * `inside: <key>` after its `charge` step and never returns: the test kills
 * the process with the request inside. It prints
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

async function store() {
  if (process.env.STORE === 'redis') {
    const { RedisIdempotencyStore } = await import('nestjs-idempotency/redis');
    return RedisIdempotencyStore.connect(process.env.REDIS_URL, {
      prefix: process.env.REDIS_PREFIX,
    });
  }
  if (process.env.STORE === 'dynamodb') {
    const { DynamoDBClient } = await import('@aws-sdk/client-dynamodb');
    const { DynamoDbIdempotencyStore } =
      await import('nestjs-idempotency/dynamodb');
    return new DynamoDbIdempotencyStore(
      new DynamoDBClient({
        endpoint: process.env.DYNAMODB_ENDPOINT,
        region: 'local',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      }),
    );
  }
  return new MemoryIdempotencyStore();
}

class PaymentsController {
  constructor(idempotency) {
    this.idempotency = idempotency;
  }

  async create(body) {
    const charge = await this.idempotency.step('charge', () => ({
      id: randomUUID(),
      by: `pid ${process.pid}`,
    }));
    if (process.env.HOLD === '1') {
      console.log(`inside: ${this.idempotency.key}`);
      // Held until the test kills the process.
      await new Promise(() => undefined);
    }
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
  imports: [
    IdempotencyModule.forRoot({
      store: await store(),
      lease: process.env.LEASE,
    }),
  ],
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
