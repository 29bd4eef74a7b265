import { Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { ambientTransactions } from './store/ambient-transaction.js';
import { IdempotencyStore } from './store/idempotency.store.js';
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
  constructor(private readonly store: IdempotencyStore) {}

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

  /**
   * A recovery point for a side effect outside the database (a payment
   * gateway, an e-mail): runs `fn` once per key. Its result is committed at
   * once in a short transaction of its own, so that when the request is
   * retried (after a crash, a timeout or an error of a later step), `step()`
   * returns the stored result instead of running `fn` again, and the handler
   * resumes at the first unfinished step. The handler's own writes and the
   * idempotency record still commit together at the end; the stored steps of
   * a key are deleted then (or when they expire, after `ttl`).
   *
   * The result must be a JSON value (objects, arrays, strings, numbers,
   * booleans, `null`); `undefined` is stored as `null`. Call the downstream
   * service with `deriveKey(name)` as its own idempotency key, so that the
   * call itself is idempotent if the process dies between the call and the
   * commit of its result.
   *
   * A step takes a second connection from the pool for a moment to commit.
   *
   * @example
   * const charge = await this.idempotency.step('charge', () =>
   *   this.gateway.charge(dto.amount, { idempotencyKey: this.idempotency.deriveKey('charge') }),
   * );
   */
  async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const tx = this.current();
    const key = this.requireKey(tx.key, 'step');
    if (typeof name !== 'string' || name.length === 0) {
      throw new IdempotencyConfigurationError(
        `Invalid step name: ${JSON.stringify(name)}.`,
        'Give every step a non-empty name, unique within the handler.',
      );
    }
    const stored = await this.store.readStep(
      tx.queryRunner,
      tx.scope,
      key,
      name,
    );
    if (stored) {
      return stored.result as T;
    }
    const result = await fn();
    await this.store.saveStep(tx.scope, key, name, result, tx.ttlMs);
    return (result ?? null) as T;
  }

  /**
   * A stable key for a downstream call made by step `name`: `<key>:<name>`.
   * The same request retried derives the same key.
   */
  deriveKey(name: string): string {
    const tx = this.current();
    return `${this.requireKey(tx.key, 'deriveKey')}:${name}`;
  }

  private requireKey(key: string | undefined, method: string): string {
    if (key === undefined) {
      throw new IdempotencyConfigurationError(
        `IdempotencyContext.${method}() needs an idempotency key, and this request has none.`,
        'Require a key on this route (the default), or derive one with the `key` option.',
      );
    }
    return key;
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
