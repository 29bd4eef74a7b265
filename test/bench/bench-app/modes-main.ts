/**
 * Entry point of the modes bench's applications (test/bench/modes.bench.ts),
 * one process per mode; `BENCH_MODE` chooses what wraps the one handler:
 *
 *   baseline  nothing: no idempotency
 *   postgres  the module on its PostgreSQL store (the record commits in the
 *             handler's transaction, the module's)
 *   encrypted the postgres mode with the `encryption` option on: a key ring
 *             of two keys, new records sealed with the current one
 *   floor     the PostgreSQL store's statements, sent by the route itself
 *             (floor.controller.ts)
 *   lean      the lean floor: the same protocol as a careful engineer
 *             would write it by hand, on a table of its own
 *             (lean.controller.ts, lean-keys.ts; the bench creates the
 *             table)
 *   redis     the module on the Redis store, `BENCH_REDIS_URL`, keys under
 *             `BENCH_REDIS_PREFIX`
 *   unfenced  the module on the Redis store whose completion is a plain,
 *             unconditional `SET` (unfenced-redis.store.ts): what the fence
 *             costs; for the bench only
 *   memory    the module on the in-memory store
 *   theirs    @node-idempotency/nestjs on Redis, installed by the bench in
 *             `BENCH_NODE_IDEMPOTENCY_DIR`, records under
 *             `BENCH_NODE_IDEMPOTENCY_PREFIX`
 *
 * All of them write with TypeORM (typeorm.library.ts). The data libraries'
 * modes write with another, without TypeORM in the application
 * (test/data-libraries/<library>.library.ts, which the soak's instances
 * write with too; the baseline's app has run the migrations):
 *
 *   <library>-baseline  the library alone: no idempotency, the writes in a
 *                       transaction of the library's own
 *   <library>           the module on the library's adapter of the
 *                       PostgreSQL store, the writes through
 *                       `IdempotencyContext<…>.transaction`
 *
 * for pg, drizzle, kysely, prisma.
 */
import { randomBytes } from 'node:crypto';
import type { DynamicModule } from '@nestjs/common';
import {
  IdempotencyModule,
  Idempotent,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { Redis } from 'ioredis';
import {
  isLibraryName,
  LIBRARY_NAMES,
  loadLibrary,
} from '../../data-libraries/payments-library.js';
import { benchLibrary, type DataLibrary } from './data-library.js';
import { FloorController } from './floor.controller.js';
import { LeanController } from './lean.controller.js';
import { listenBenchApp } from './listen.js';
import { modeController } from './modes.controller.js';
import { ModesAppModule } from './modes.module.js';
import { typeOrmLibrary } from './typeorm.library.js';
import { UnfencedRedisStore } from './unfenced-redis.store.js';
import {
  nodeIdempotencyModule,
  requireNodeIdempotency,
} from './node-idempotency.js';

const MODE = process.env.BENCH_MODE ?? 'baseline';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** The module with the sample's options, and `options`. */
const idempotency = (
  options: Parameters<typeof IdempotencyModule.forRoot>[0] = {},
) => IdempotencyModule.forRoot({ ttl: '24h', ...options });

/** The handler on TypeORM, alone, under `decorate()` and `imports`. */
const onTypeOrm = (
  decorate?: () => MethodDecorator,
  imports: DynamicModule[] = [],
) =>
  ModesAppModule.forMode(
    typeOrmLibrary,
    typeOrmLibrary.alone,
    modeController(decorate),
    imports,
  );

/**
 * The handler on `library`: alone, or under the module on its adapter with
 * `options`.
 */
function onLibrary(
  library: DataLibrary,
  module: boolean,
  options: Parameters<typeof IdempotencyModule.forRoot>[0] = {},
): DynamicModule {
  return module
    ? ModesAppModule.forMode(
        library,
        library.module,
        modeController(Idempotent),
        [
          idempotency({
            ...options,
            ...(library.adapter && { adapter: library.adapter }),
          }),
        ],
      )
    : ModesAppModule.forMode(library, library.alone, modeController());
}

async function mode(): Promise<DynamicModule> {
  switch (MODE) {
    case 'baseline':
      return onTypeOrm();
    case 'postgres':
      return onLibrary(typeOrmLibrary, true);
    case 'encrypted':
      return onLibrary(typeOrmLibrary, true, {
        encryption: {
          keys: { old: randomBytes(32), current: randomBytes(32) },
          current: 'current',
        },
      });
    case 'floor':
    case 'lean':
      return ModesAppModule.forMode(
        typeOrmLibrary,
        typeOrmLibrary.alone,
        MODE === 'floor' ? FloorController : LeanController,
      );
    case 'redis':
      return onTypeOrm(Idempotent, [
        idempotency({
          store: {
            useFactory: () =>
              RedisIdempotencyStore.connect(REDIS_URL, {
                prefix: process.env.BENCH_REDIS_PREFIX,
              }),
          },
        }),
      ]);
    case 'unfenced':
      return onTypeOrm(Idempotent, [
        idempotency({
          store: new UnfencedRedisStore(
            new Redis(REDIS_URL, { maxRetriesPerRequest: 1 }),
            { prefix: process.env.BENCH_REDIS_PREFIX },
          ),
        }),
      ]);
    case 'memory':
      return onTypeOrm(Idempotent, [
        idempotency({ store: new MemoryIdempotencyStore() }),
      ]);
    case 'theirs': {
      const dir = process.env.BENCH_NODE_IDEMPOTENCY_DIR;
      if (!dir) {
        throw new Error('BENCH_MODE=theirs needs BENCH_NODE_IDEMPOTENCY_DIR');
      }
      const library = requireNodeIdempotency(dir);
      return onTypeOrm(
        () => library.Idempotent(),
        [
          nodeIdempotencyModule(
            library,
            REDIS_URL,
            process.env.BENCH_NODE_IDEMPOTENCY_PREFIX ?? 'node-idempotency',
          ),
        ],
      );
    }
    default: {
      const [name, baseline] = MODE.split('-');
      if (
        !isLibraryName(name) ||
        (baseline !== undefined && baseline !== 'baseline')
      ) {
        throw new Error(
          `BENCH_MODE=${MODE}: expected baseline, postgres, encrypted, floor, lean, redis, unfenced, memory, theirs, ` +
            `or a library (${LIBRARY_NAMES.join(', ')}) with or without -baseline`,
        );
      }
      return onLibrary(
        benchLibrary(await loadLibrary(name)),
        baseline === undefined,
      );
    }
  }
}

await listenBenchApp(await mode());
