import type { DynamicModule, InjectionToken, Type } from '@nestjs/common';
import type { IdempotencyStore } from './idempotency-store.interface.js';

/** Modules whose providers the factory of a store injects. */
type StoreImports = Array<Type | DynamicModule | Promise<DynamicModule>>;

/**
 * The store of the module's records, given to `IdempotencyModule.forRoot()`
 * or `forRootAsync()` as `store` (beside the options, not in the object
 * their factory returns): a store instance, or a provider of one, the
 * NestJS way.
 *
 * Without it, the module uses the PostgreSQL store on the application's
 * TypeORM DataSource: the only store whose record commits in the same
 * transaction as the handler's writes. Any other store (Redis, DynamoDB,
 * memory) completes the record right after the handler returns: the module
 * then opens no database transaction, needs neither TypeORM nor pg, and a
 * crash between the handler's side effects and the completion lets a retry
 * run the handler again.
 *
 * @example
 * // An instance:
 * IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })
 * // Built by a factory, from injected providers:
 * IdempotencyModule.forRootAsync({
 *   store: {
 *     imports: [ConfigModule],
 *     inject: [ConfigService],
 *     useFactory: (config: ConfigService) =>
 *       new RedisIdempotencyStore(new Redis(config.get('REDIS_URL'))),
 *   },
 *   inject: [ConfigService],
 *   useFactory: (config: ConfigService) => ({ ttl: config.get('IDEMPOTENCY_TTL') }),
 * })
 * // A provider the application already has:
 * IdempotencyModule.forRoot({ store: { useExisting: MY_STORE } })
 */
export type IdempotencyStoreOption =
  | IdempotencyStore
  | {
      /** Builds the store, from the providers of `inject`. */
      readonly useFactory: (
        ...args: any[] // eslint-disable-line @typescript-eslint/no-explicit-any
      ) => IdempotencyStore | Promise<IdempotencyStore>;
      /** Providers handed to `useFactory`, in order. @default [] */
      readonly inject?: InjectionToken[];
      /** Modules that export the providers of `inject`. @default [] */
      readonly imports?: StoreImports;
    }
  | {
      /** A provider of the application that is the store. */
      readonly useExisting: InjectionToken;
      /** Modules that export it, when it is not global. @default [] */
      readonly imports?: StoreImports;
    }
  | {
      /** A store class, instantiated with its own dependencies injected. */
      readonly useClass: Type<IdempotencyStore>;
      /** Modules that export the class's dependencies. @default [] */
      readonly imports?: StoreImports;
    };

/** Options of `IdempotencyModule.forRoot()`/`forRootAsync()` beside the module's own. */
export interface IdempotencyStoreExtras {
  /**
   * The store of the records.
   * @default the PostgreSQL store, on the application's TypeORM DataSource
   * (see `dataSource`)
   */
  readonly store?: IdempotencyStoreOption;
}
