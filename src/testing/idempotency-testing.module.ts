import type { DynamicModule } from '@nestjs/common';
import { IdempotencyModule } from '../idempotency.module.js';
import type { IdempotencyModuleOptions } from '../interfaces/idempotency-module-options.interface.js';
import { MemoryIdempotencyStore } from '../stores/memory/memory.store.js';

/**
 * `IdempotencyModule` on a {@link MemoryIdempotencyStore}, for the tests of
 * an application: no database, no TypeORM, and garbage collection off.
 * Import it in a test module of your own, beside the feature modules under
 * test.
 *
 * To test the application module itself, replace its store instead:
 * `overrideProvider(IdempotencyStore).useValue(new MemoryIdempotencyStore())`
 * keeps the application's options and leaves nothing of the PostgreSQL
 * store. `overrideModule(IdempotencyModule).useModule(...)` does nothing:
 * Nest matches a module override by the identity of an import, and the
 * application imports the object `forRoot()` returned, not the class.
 *
 * @example
 * import { IdempotencyTestingModule } from 'nestjs-idempotency/testing';
 *
 * const moduleRef = await Test.createTestingModule({
 *   imports: [IdempotencyTestingModule.forRoot({ ttl: '1h' }), PaymentsModule],
 * }).compile();
 */
export class IdempotencyTestingModule {
  /**
   * @param options module options, as `IdempotencyModule.forRoot()` takes
   * them (every field has its default); `gc` is `false` unless given.
   * @param store the store: a new {@link MemoryIdempotencyStore} unless
   * given (pass one to look into it or `clear()` it between tests).
   */
  static forRoot(
    options: IdempotencyModuleOptions = {},
    store: MemoryIdempotencyStore = new MemoryIdempotencyStore(),
  ): DynamicModule {
    return IdempotencyModule.forRoot({ gc: false, ...options, store });
  }
}
