/**
 * Entry point of the modes bench's applications (test/bench/modes.bench.ts),
 * one process per mode; `BENCH_MODE` chooses what wraps the one handler:
 *
 *   baseline  nothing: no idempotency
 *   postgres  the module on its PostgreSQL store (the record commits in the
 *             handler's transaction, the module's)
 *   floor     the PostgreSQL store's statements, sent by the route itself
 *             (floor.controller.ts)
 *   redis     the module on the Redis store, `BENCH_REDIS_URL`, keys under
 *             `BENCH_REDIS_PREFIX`
 *   unfenced  the module on the Redis store whose completion is a plain,
 *             unconditional `SET` (unfenced-redis.store.ts): what the fence
 *             costs; for the bench only
 *   memory    the module on the in-memory store
 *   theirs    @node-idempotency/nestjs on Redis, installed by the bench in
 *             `BENCH_NODE_IDEMPOTENCY_DIR`, records under
 *             `BENCH_NODE_IDEMPOTENCY_PREFIX`
 */
import type { DynamicModule, Type } from '@nestjs/common';
import {
  IdempotencyModule,
  Idempotent,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';
import type { IdempotencyStoreOption } from 'nestjs-idempotency/store';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { Redis } from 'ioredis';
import { FloorController } from './floor.controller.js';
import { listenBenchApp } from './listen.js';
import { modeController } from './modes.controller.js';
import { ModesAppModule } from './modes.module.js';
import { UnfencedRedisStore } from './unfenced-redis.store.js';
import {
  nodeIdempotencyModule,
  requireNodeIdempotency,
} from './node-idempotency.js';

const MODE = process.env.BENCH_MODE ?? 'baseline';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** The module with the sample's options, on `store` (PostgreSQL if none). */
const idempotency = (store?: IdempotencyStoreOption) =>
  IdempotencyModule.forRoot({ ttl: '24h', store });

function mode(): [Type, DynamicModule[]] {
  switch (MODE) {
    case 'baseline':
      return [modeController('own'), []];
    case 'postgres':
      return [modeController('module', Idempotent), [idempotency()]];
    case 'floor':
      return [FloorController, []];
    case 'redis':
      return [
        modeController('own', Idempotent),
        [
          idempotency({
            useFactory: () =>
              RedisIdempotencyStore.connect(REDIS_URL, {
                prefix: process.env.BENCH_REDIS_PREFIX,
              }),
          }),
        ],
      ];
    case 'unfenced':
      return [
        modeController('own', Idempotent),
        [
          idempotency(
            new UnfencedRedisStore(
              new Redis(REDIS_URL, { maxRetriesPerRequest: 1 }),
              { prefix: process.env.BENCH_REDIS_PREFIX },
            ),
          ),
        ],
      ];
    case 'memory':
      return [
        modeController('own', Idempotent),
        [idempotency(new MemoryIdempotencyStore())],
      ];
    case 'theirs': {
      const dir = process.env.BENCH_NODE_IDEMPOTENCY_DIR;
      if (!dir) {
        throw new Error('BENCH_MODE=theirs needs BENCH_NODE_IDEMPOTENCY_DIR');
      }
      const library = requireNodeIdempotency(dir);
      return [
        modeController('own', () => library.Idempotent()),
        [
          nodeIdempotencyModule(
            library,
            REDIS_URL,
            process.env.BENCH_NODE_IDEMPOTENCY_PREFIX ?? 'node-idempotency',
          ),
        ],
      ];
    }
    default:
      throw new Error(
        `BENCH_MODE=${MODE}: expected baseline, postgres, floor, redis, unfenced, memory or theirs`,
      );
  }
}

await listenBenchApp(ModesAppModule.forMode(...mode()));
