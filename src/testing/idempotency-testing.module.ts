import type { DynamicModule } from '@nestjs/common';
import { IdempotencyModule } from '../idempotency.module.js';
import type { IdempotencyModuleOptions } from '../interfaces/idempotency-options.interface.js';
import { MemoryIdempotencyStore } from '../stores/memory/memory.store.js';

/**
 * `IdempotencyModule` on a {@link MemoryIdempotencyStore}, for the tests of
 * an application: no database, no TypeORM, and garbage collection off. Swap
 * it in for the application's own registration in one line.
 *
 * @example
 * import { IdempotencyTestingModule } from 'nestjs-idempotency/testing';
 *
 * const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
 *   .overrideModule(IdempotencyModule)
 *   .useModule(IdempotencyTestingModule.forRoot())
 *   .compile();
 * // or, in a test module of its own:
 * imports: [IdempotencyTestingModule.forRoot({ ttl: '1h' }), PaymentsModule]
 */
export class IdempotencyTestingModule {
  /**
   * @param options module options, as `IdempotencyModule.forRoot()` takes
   * them; `gc` is `false` unless given.
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
