/**
 * Entry point of the stores bench's application (test/bench/stores.bench.ts),
 * a process of its own; `BENCH_STORE` chooses the idempotency module's store:
 *
 *   postgres  the application of `npm run bench` as it is (the record
 *             commits in the handler's transaction)
 *   redis     `BENCH_REDIS_URL`, keys under `BENCH_REDIS_PREFIX`
 *   dynamodb  `BENCH_DYNAMODB_ENDPOINT` (dynalite); creates its table
 *   memory    the in-memory store
 *
 * With `BENCH_NODE_IDEMPOTENCY_DIR` (where the bench installed it) and the
 * Redis store, `POST /theirs/payments` runs under @node-idempotency/nestjs
 * on the same Redis, its records under `BENCH_NODE_IDEMPOTENCY_PREFIX`.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { IdempotencyStoreOption } from 'nestjs-idempotency/store';
import { MemoryIdempotencyStore } from 'nestjs-idempotency';
import { DynamoDbIdempotencyStore } from 'nestjs-idempotency/dynamodb';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { BenchAppModule } from './bench.module.js';
import { listenBenchApp } from './listen.js';
import { nodeIdempotency } from './node-idempotency.js';
import { StoresBenchAppModule } from './stores.module.js';

const STORE = process.env.BENCH_STORE ?? 'postgres';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

function store(): IdempotencyStoreOption {
  switch (STORE) {
    case 'redis':
      return {
        useFactory: () =>
          RedisIdempotencyStore.connect(REDIS_URL, {
            prefix: process.env.BENCH_REDIS_PREFIX,
          }),
      };
    case 'dynamodb':
      return {
        useFactory: async () => {
          const client = new DynamoDBClient({
            endpoint: process.env.BENCH_DYNAMODB_ENDPOINT,
            region: 'local',
            credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
          });
          // dynalite has no TTL to enable; expiry never rests on it anyway.
          await DynamoDbIdempotencyStore.createTable(client, {
            timeToLive: false,
          });
          return new DynamoDbIdempotencyStore(client);
        },
      };
    case 'memory':
      return new MemoryIdempotencyStore();
    default:
      throw new Error(
        `BENCH_STORE=${STORE}: expected postgres, redis, dynamodb or memory`,
      );
  }
}

const theirsDir = process.env.BENCH_NODE_IDEMPOTENCY_DIR;
const theirs =
  theirsDir && STORE === 'redis'
    ? nodeIdempotency(
        theirsDir,
        REDIS_URL,
        process.env.BENCH_NODE_IDEMPOTENCY_PREFIX ?? 'node-idempotency',
      )
    : undefined;

await listenBenchApp(
  STORE === 'postgres'
    ? BenchAppModule
    : StoresBenchAppModule.forStore(store(), {
        imports: theirs ? [theirs.module] : [],
        controllers: theirs ? [theirs.controller] : [],
      }),
);
