import { Injectable, Module, type DynamicModule } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  IdempotencyConfigurationError,
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
} from '../../src/index.js';
import { IdempotencyTestingModule } from '../../src/testing/index.js';

const STORE = Symbol('STORE');

@Injectable()
class StoreConfig {
  readonly allowInProduction = false;
}

@Module({ providers: [StoreConfig], exports: [StoreConfig] })
class StoreConfigModule {}

/** Boots `module`, runs one key through IdempotencyService twice. */
async function runTwice(module: DynamicModule, extra: DynamicModule[] = []) {
  const moduleRef = await Test.createTestingModule({
    imports: [module, ...extra],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  try {
    const service = app.get(IdempotencyService);
    let runs = 0;
    const work = () => ({ runs: (runs += 1) });
    const results = [
      await service.run({ key: 'k' }, work),
      await service.run({ key: 'k' }, work),
    ];
    return { results, runs };
  } finally {
    await app.close();
  }
}

describe('the `store` option', () => {
  it('takes a store built by a factory, from injected providers of imported modules (forRootAsync)', async () => {
    const stores: MemoryIdempotencyStore[] = [];
    const outcome = await runTwice(
      IdempotencyModule.forRootAsync({
        store: {
          imports: [StoreConfigModule],
          inject: [StoreConfig],
          useFactory: (config: StoreConfig) => {
            const store = new MemoryIdempotencyStore(config);
            stores.push(store);
            return store;
          },
        },
        useFactory: () => ({ gc: false as const }),
      }),
    );
    expect(outcome).toEqual({ results: [{ runs: 1 }, { runs: 1 }], runs: 1 });
    expect(stores).toHaveLength(1);
    expect(stores[0].size).toBe(1);
  });

  it('takes a provider the application already has (useExisting)', async () => {
    const store = new MemoryIdempotencyStore();
    @Module({
      providers: [{ provide: STORE, useValue: store }],
      exports: [STORE],
    })
    class AppStoreModule {}
    const outcome = await runTwice(
      IdempotencyModule.forRoot({
        gc: false,
        store: { useExisting: STORE, imports: [AppStoreModule] },
      }),
    );
    expect(outcome.runs).toBe(1);
    expect(store.size).toBe(1);
  });

  it('swaps the store in one line in tests (IdempotencyTestingModule)', async () => {
    const store = new MemoryIdempotencyStore();
    const outcome = await runTwice(
      IdempotencyTestingModule.forRoot({ ttl: '1h' }, store),
    );
    expect(outcome.runs).toBe(1);
    expect(store.size).toBe(1);
  });

  it('refuses what is not a store, saying what to give', () => {
    expect(() =>
      IdempotencyModule.forRoot({ store: { claim: 1 } as never }),
    ).toThrow(IdempotencyConfigurationError);
    expect(() =>
      IdempotencyModule.forRoot({ store: { claim: 1 } as never }),
    ).toThrow(/neither a store nor a provider of one: claim/);
  });

  it('refuses a factory that returns no store, and a store that claims to complete in the transaction', async () => {
    for (const [store, message] of [
      [{ useFactory: () => ({}) }, /lacks some of the methods/],
      [
        {
          useFactory: () =>
            Object.assign(new MemoryIdempotencyStore(), {
              completesInTransaction: true,
            }),
        },
        /only the built-in PostgreSQL store can/,
      ],
    ] as const) {
      const moduleRef = await Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ gc: false, store } as never)],
      }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await expect(app.init()).rejects.toThrow(message);
      await app.close();
    }
  });
});
