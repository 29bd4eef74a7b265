import { Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { ambientTransactions } from './typeorm/ambient-transaction.js';
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
    return this.current().transaction.manager;
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
   * A step holds no connection while `fn` runs: it reads and commits its
   * result in a statement of its own each, fenced by the request's claim (a
   * request whose claim was taken over gets `503`). Run steps before the
   * handler's first database statement: a step that runs while the
   * handler's transaction is open keeps that connection during `fn`, and
   * the module logs a warning once per route.
   *
   * @example
   * const charge = await this.idempotency.step('charge', () =>
   *   this.gateway.charge(dto.amount, { idempotencyKey: this.idempotency.deriveKey('charge') }),
   * );
   */
  async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    return this.current().step(name, fn);
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
