import type { DynamicModule, Provider } from '@nestjs/common';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { IdempotencyStoreOption } from '../interfaces/idempotency-store-option.interface.js';
import { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';
import { IdempotencyDataSource } from '../typeorm/idempotency-data-source.js';
import {
  loadTypeormRuntime,
  TYPEORM_RUNTIME,
} from '../typeorm/typeorm-runtime.js';
import { PostgresIdempotencyStore } from './postgres/postgres.store.js';

const STORE_METHODS = [
  'claim',
  'renew',
  'complete',
  'release',
  'notify',
  'watch',
  'readStep',
  'saveStep',
  'collect',
] as const;

/** @internal Whether `value` has the methods of an {@link IdempotencyStore}. */
export function isIdempotencyStore(value: unknown): value is IdempotencyStore {
  return (
    typeof value === 'object' &&
    value !== null &&
    STORE_METHODS.every(
      (method) =>
        typeof (value as Record<string, unknown>)[method] === 'function',
    )
  );
}

/**
 * @internal Adds the store's providers to the module's definition: those of
 * the `store` option, or, without it, the PostgreSQL store and the
 * TypeORM side it runs on (TypeORM is imported then only).
 */
export function withStore(
  definition: DynamicModule,
  store: IdempotencyStoreOption | undefined,
): DynamicModule {
  const providers: Provider[] = [...(definition.providers ?? [])];
  const imports = [...(definition.imports ?? [])];
  if (store === undefined) {
    providers.push(
      { provide: TYPEORM_RUNTIME, useFactory: loadTypeormRuntime },
      IdempotencyDataSource,
      PostgresIdempotencyStore,
      { provide: IdempotencyStore, useExisting: PostgresIdempotencyStore },
    );
  } else if (isIdempotencyStore(store)) {
    providers.push({ provide: IdempotencyStore, useValue: store });
  } else if (typeof store === 'object' && store !== null) {
    imports.push(...(store.imports ?? []));
    if ('useFactory' in store && typeof store.useFactory === 'function') {
      providers.push({
        provide: IdempotencyStore,
        useFactory: store.useFactory,
        inject: store.inject ?? [],
      });
    } else if ('useExisting' in store && store.useExisting !== undefined) {
      providers.push({
        provide: IdempotencyStore,
        useExisting: store.useExisting,
      });
    } else if ('useClass' in store && typeof store.useClass === 'function') {
      providers.push({ provide: IdempotencyStore, useClass: store.useClass });
    } else {
      throw invalidStore(store);
    }
  } else {
    throw invalidStore(store);
  }
  return { ...definition, providers, imports };
}

function invalidStore(store: unknown): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `IdempotencyModule's \`store\` is neither a store nor a provider of one: ${typeof store === 'object' ? Object.keys(store ?? {}).join(', ') || 'an empty object' : String(store)}.`,
    'Pass a store instance: `store: new MemoryIdempotencyStore()` (or a Redis or DynamoDB store).',
    'Or a provider of one: `store: { useFactory, inject }`, `{ useExisting: token }` or `{ useClass }`.',
    'Omit `store` for the PostgreSQL store on the TypeORM DataSource.',
  );
}
