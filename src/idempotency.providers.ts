import {
  ConfigurableModuleBuilder,
  type DynamicModule,
  type Provider,
} from '@nestjs/common';
import { APP_INTERCEPTOR, ModuleRef } from '@nestjs/core';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-module-options.interface.js';
import type {
  IdempotencyStoreExtras,
  IdempotencyStoreOption,
} from './interfaces/idempotency-store-option.interface.js';
import { IdempotencyStore } from './interfaces/idempotency-store.interface.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from './idempotency.options.js';
import { resolveModuleOptions } from './idempotency.module-options.js';
import { AttemptTelemetry } from './core/attempt-telemetry.js';
import { ExecutorEvents } from './core/executor.events.js';
import { ExecutorOptions } from './core/executor.options.js';
import { HandlerTransactions } from './interfaces/handler-transaction.interface.js';
import { NO_HANDLER_TRANSACTIONS } from './core/no-transaction.js';
import { isIdempotencyStore } from './core/is-idempotency-store.js';
import { IdempotencyExecutor } from './core/idempotency.executor.js';
import { IdempotencyContext } from './idempotency.context.js';
import { IdempotencyExplorer } from './idempotency.explorer.js';
import { IdempotencyRoutes } from './idempotency.routes.js';
import { IdempotencyCollector } from './idempotency.collector.js';
import { IdempotencyPrivacy } from './privacy/idempotency-privacy.service.js';
import { IdempotencyEvents } from './idempotency.events.js';
import { IdempotencyService } from './idempotency.service.js';
import { IdempotencyAdmin } from './admin/idempotency.admin.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { IdempotencyHttp } from './http/idempotency.http.js';
import { IdempotencyMessages } from './messages/idempotency.messages.js';
import { IdempotencyKafka } from './messages/idempotency.kafka.js';
import { IdempotencyGraphql } from './graphql/idempotency.graphql.js';
import { IdempotencyJobs } from './bullmq/idempotency.jobs.js';
import { IdempotencyProcessors } from './bullmq/idempotency.processors.js';
import { idempotencyOpenApi } from './openapi/idempotency-openapi.js';
import { IdempotencyTelemetry } from './telemetry/idempotency.telemetry.js';
import { TypeOrmIdempotencyAdapter } from './typeorm/typeorm.adapter.js';
import { PostgresIdempotencyStore } from './stores/postgres/postgres.store.js';

/** @internal */
export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({
  moduleName: 'Idempotency',
})
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createIdempotencyOptions')
  .setExtras<IdempotencyStoreExtras>(
    { store: undefined },
    (definition, extras) => withStore(definition, extras.store),
  )
  .build();

/**
 * @internal The providers of the module whatever its store: options, the
 * request sequence, the transports' adapters and the integrations. Those
 * of the store are added by `forRoot()`/`forRootAsync()` (see withStore).
 */
export const IDEMPOTENCY_PROVIDERS: Provider[] = [
  {
    provide: IDEMPOTENCY_RESOLVED_OPTIONS,
    useFactory: (options: IdempotencyModuleOptions) =>
      resolveModuleOptions(options),
    inject: [IDEMPOTENCY_MODULE_OPTIONS],
  },
  { provide: ExecutorOptions, useExisting: IDEMPOTENCY_RESOLVED_OPTIONS },
  IdempotencyRoutes,
  IdempotencyEvents,
  { provide: ExecutorEvents, useExisting: IdempotencyEvents },
  {
    provide: AttemptTelemetry,
    useFactory: (options: ResolvedIdempotencyOptions) =>
      IdempotencyTelemetry.load(options),
    inject: [IDEMPOTENCY_RESOLVED_OPTIONS],
  },
  IdempotencyExecutor,
  IdempotencyService,
  IdempotencyHttp,
  IdempotencyMessages,
  IdempotencyKafka,
  IdempotencyGraphql,
  IdempotencyJobs,
  IdempotencyProcessors,
  IdempotencyExplorer,
  idempotencyOpenApi,
  IdempotencyCollector,
  IdempotencyPrivacy,
  IdempotencyAdmin,
  IdempotencyContext,
  { provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor },
];

/**
 * @internal Adds the store's providers to the module's definition: those of
 * the `store` option, or, without it, the PostgreSQL store and the
 * TypeORM side it runs on (TypeORM is imported then only), which is also
 * where handlers' transactions come from.
 *
 * Everything of the PostgreSQL store hangs off the `IdempotencyStore`
 * provider, and the handlers' transactions follow whichever store that
 * provider gives: an application's test that replaces the store
 * (`overrideProvider(IdempotencyStore)`) then imports no TypeORM, looks up
 * no DataSource and sends no statement.
 */
function withStore(
  definition: DynamicModule,
  store: IdempotencyStoreOption | undefined,
): DynamicModule {
  const providers: Provider[] = [
    ...(definition.providers ?? []),
    {
      provide: HandlerTransactions,
      useFactory: handlerTransactionsOf,
      inject: [IdempotencyStore],
    },
  ];
  const imports = [...(definition.imports ?? [])];
  if (store === undefined) {
    providers.push({
      provide: IdempotencyStore,
      useFactory: postgresStore,
      inject: [ModuleRef, IDEMPOTENCY_RESOLVED_OPTIONS],
    });
    return { ...definition, providers, imports };
  }
  if (isIdempotencyStore(store)) {
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

/**
 * The PostgreSQL store on the application's data library (`adapter`, by
 * default TypeORM). Nest runs the lifecycle hooks of both halves: the
 * store's as the `IdempotencyStore` provider's, the data library's as the
 * `HandlerTransactions` one's.
 */
async function postgresStore(
  moduleRef: ModuleRef,
  options: ResolvedIdempotencyOptions,
): Promise<IdempotencyStore> {
  const adapter =
    options.adapter ??
    new TypeOrmIdempotencyAdapter({ dataSource: options.dataSource });
  return new PostgresIdempotencyStore(await adapter.create(moduleRef), options);
}

/**
 * The handlers' transactions: those the store completes in, or none
 * (including with a store a test put in its place).
 */
function handlerTransactionsOf(store: IdempotencyStore): HandlerTransactions {
  return store.transactions ?? NO_HANDLER_TRANSACTIONS;
}

function invalidStore(store: unknown): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `IdempotencyModule's \`store\` is neither a store nor a provider of one: ${typeof store === 'object' ? Object.keys(store ?? {}).join(', ') || 'an empty object' : String(store)}.`,
    'Pass a store instance: `store: new MemoryIdempotencyStore()` (or a Redis or DynamoDB store).',
    'Or a provider of one: `store: { useFactory, inject }`, `{ useExisting: token }` or `{ useClass }`.',
    'Omit `store` for the PostgreSQL store on the TypeORM DataSource.',
  );
}
