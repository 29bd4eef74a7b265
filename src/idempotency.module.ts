import { Global, Module, type DynamicModule } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { IdempotencyContext } from './idempotency.context.js';
import { IdempotencyCollector } from './idempotency.collector.js';
import { IdempotencyPrivacy } from './privacy/idempotency-privacy.service.js';
import { IdempotencyService } from './idempotency.service.js';
import { IdempotencyAdmin } from './admin/idempotency.admin.js';
import { IdempotencyKafka } from './messages/idempotency.kafka.js';
import {
  ConfigurableModuleClass,
  IDEMPOTENCY_PROVIDERS,
  type ASYNC_OPTIONS_TYPE,
  type OPTIONS_TYPE,
} from './idempotency.providers.js';

/**
 * Makes handlers decorated with `@Idempotent()` idempotent, on the
 * application's TypeORM PostgreSQL DataSource, or on the store given as
 * `store` (see `IdempotencyStoreOption`). Import it once, in the root
 * module; it is global. An application's tests replace its store by its
 * token, whatever the store: `overrideProvider(IdempotencyStore)
 * .useValue(new MemoryIdempotencyStore())` (Nest's `overrideModule()` cannot
 * reach the module `forRoot()` returns).
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
  providers: IDEMPOTENCY_PROVIDERS,
  exports: [
    IdempotencyContext,
    IdempotencyCollector,
    IdempotencyPrivacy,
    IdempotencyService,
    IdempotencyAdmin,
    IdempotencyKafka,
  ],
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
