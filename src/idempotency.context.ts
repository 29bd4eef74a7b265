import { Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { ambientTransactions } from './store/ambient-transaction.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';

/**
 * Explicit access to the transaction of the decorated handler being executed.
 *
 * Repositories and managers of the application already write through this
 * transaction while a decorated handler runs; inject `IdempotencyContext` in
 * code that prefers to say so.
 *
 * @example
 * constructor(private readonly idempotency: IdempotencyContext) {}
 * async create(dto: CreatePaymentDto) {
 *   return this.idempotency.manager.save(Payment, dto);
 * }
 */
@Injectable()
export class IdempotencyContext {
  /** Whether the current code runs inside a decorated handler's transaction. */
  get isActive(): boolean {
    return ambientTransactions.getStore() !== undefined;
  }

  /**
   * The `EntityManager` of the current handler's transaction.
   * @throws IdempotencyConfigurationError outside a decorated handler.
   */
  get manager(): EntityManager {
    return this.current().manager;
  }

  /**
   * The idempotency key of the current request, or `undefined` for a keyless
   * request on a route with `required: false`.
   * @throws IdempotencyConfigurationError outside a decorated handler.
   */
  get key(): string | undefined {
    return this.current().key;
  }

  /**
   * The scope of the current request.
   * @throws IdempotencyConfigurationError outside a decorated handler.
   */
  get scope(): string {
    return this.current().scope;
  }

  private current() {
    const tx = ambientTransactions.getStore();
    if (!tx) {
      throw new IdempotencyConfigurationError(
        'IdempotencyContext was used outside of an @Idempotent() handler.',
        'Use it only in code called from a handler decorated with @Idempotent().',
        'Check `isActive` first in code that also runs elsewhere.',
      );
    }
    return tx;
  }
}
