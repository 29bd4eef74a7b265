import { Global, Module, type DynamicModule } from '@nestjs/common';
import { APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import {
  ConfigurableModuleClass,
  IDEMPOTENCY_MODULE_OPTIONS,
  type ASYNC_OPTIONS_TYPE,
  type OPTIONS_TYPE,
} from './idempotency.module-definition.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import {
  resolveModuleOptions,
  type ResolvedIdempotencyOptions,
} from './idempotency.options.js';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-options.interface.js';
import { IdempotencyContext } from './idempotency.context.js';
import { IdempotencyInterceptor } from './http/idempotency.interceptor.js';
import { IdempotencyExecutor } from './core/idempotency.executor.js';
import { IdempotencyExplorer } from './idempotency.explorer.js';
import { IdempotencyRoutes } from './idempotency.routes.js';
import { IdempotencyCollector } from './idempotency.collector.js';
import { IdempotencyEvents } from './idempotency.events.js';
import { IdempotencyService } from './idempotency.service.js';
import { IdempotencyMessages } from './messages/idempotency.messages.js';
import { idempotencyOpenApi } from './openapi/idempotency-openapi.js';
import { IdempotencyGraphql } from './graphql/idempotency.graphql.js';
import { IdempotencyTelemetry } from './telemetry/idempotency.telemetry.js';
import { IdempotencyJobs } from './bullmq/idempotency.jobs.js';
import { IdempotencyProcessors } from './bullmq/idempotency.processors.js';

/**
 * Makes handlers decorated with `@Idempotent()` idempotent, on the
 * application's TypeORM PostgreSQL DataSource, or on the store given as
 * `store` (see `IdempotencyStoreOption`). Import it once, in the root
 * module; it is global.
 *
 * @example
 * imports: [
 *   TypeOrmModule.forRoot({
 *     type: 'postgres',
 *     url,
 *     migrations: [...idempotencyMigrations],
 *     migrationsRun: true,
 *   }),
 *   IdempotencyModule.forRoot({ ttl: '24h' }),
 * ]
 */
@Global()
@Module({
  imports: [DiscoveryModule, ScheduleModule.forRoot()],
  providers: [
    {
      provide: IDEMPOTENCY_RESOLVED_OPTIONS,
      useFactory: (options: IdempotencyModuleOptions) =>
        resolveModuleOptions(options),
      inject: [IDEMPOTENCY_MODULE_OPTIONS],
    },
    // The store's providers are added by forRoot()/forRootAsync() (their
    // `store` option, or the PostgreSQL store).
    IdempotencyRoutes,
    IdempotencyEvents,
    {
      provide: IdempotencyTelemetry,
      useFactory: (options: ResolvedIdempotencyOptions) =>
        IdempotencyTelemetry.load(options),
      inject: [IDEMPOTENCY_RESOLVED_OPTIONS],
    },
    IdempotencyExecutor,
    IdempotencyService,
    IdempotencyMessages,
    IdempotencyGraphql,
    IdempotencyJobs,
    IdempotencyProcessors,
    IdempotencyExplorer,
    idempotencyOpenApi,
    IdempotencyCollector,
    IdempotencyContext,
    { provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor },
  ],
  exports: [IdempotencyContext, IdempotencyCollector, IdempotencyService],
})
export class IdempotencyModule extends ConfigurableModuleClass {
  /**
   * Registers the module with static options.
   * @param options module-wide options, and the `store` (by default, the
   * PostgreSQL store on the TypeORM DataSource); every field has a default.
   */
  static forRoot(options: typeof OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }

  /**
   * Registers the module with options from a factory, a class or an existing
   * provider: `{ imports, inject, useFactory }`, `{ useClass }` (a class with
   * `createIdempotencyOptions()`) or `{ useExisting }`; and the `store`
   * beside them (by default, the PostgreSQL store on the TypeORM
   * DataSource).
   */
  static forRootAsync(options: typeof ASYNC_OPTIONS_TYPE): DynamicModule {
    return super.forRootAsync(options);
  }
}
