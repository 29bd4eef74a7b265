import type { DataSource, EntityManager } from 'typeorm';
import { handlerContexts } from '../core/handler-context.js';
import {
  addTransactionParticipant as addParticipant,
  transactionParticipants as participantsOf,
  type TransactionParticipant as Participant,
} from '../core/transaction-participants.js';
import { handlerTransactionOf } from './ambient-transaction.js';
import type { LazyTransaction } from './lazy-transaction.js';

/** @internal A transaction library that joins TypeORM handlers' transactions. */
export type TransactionParticipant = Participant<LazyTransaction>;

/**
 * @internal Makes `participant` join the transaction of every decorated
 * handler on `dataSource`.
 */
export function addTransactionParticipant(
  dataSource: DataSource,
  participant: TransactionParticipant,
): void {
  addParticipant(dataSource, participant);
}

/** @internal The participants of `dataSource`, in the order they were added. */
export function transactionParticipants(
  dataSource: DataSource,
): readonly TransactionParticipant[] {
  return participantsOf<LazyTransaction>(dataSource);
}

/**
 * @internal Whether the code running is a decorated handler's, on
 * `dataSource`: its statements then go through the handler's transaction.
 */
export function inHandlerTransaction(dataSource: DataSource): boolean {
  return handlerTransactionOf(dataSource) !== undefined;
}

/**
 * @internal Runs `fn` outside of the handler's transaction: TypeORM then
 * opens a transaction of its own, on another connection of the pool, for
 * the `dataSource.transaction()` that `fn` calls.
 */
export function outsideHandlerTransaction<T>(fn: () => T): T {
  return handlerContexts.exit(fn);
}

/**
 * @internal A manager of `dataSource` whose statements run outside of the
 * handler's transaction, in autocommit, wherever they are made: each of
 * its methods runs out of the handler's context (see
 * {@link outsideHandlerTransaction}), and the repositories and query
 * builders it makes are bound to it, or to no runner of the handler's.
 */
export function untransactedManager(dataSource: DataSource): EntityManager {
  return runningOutside(dataSource.createEntityManager());
}

/**
 * `target`, each of whose methods runs out of the handler's context (see
 * {@link outsideHandlerTransaction}); a query builder a method makes is the
 * same. A query builder without a runner takes the handler's when it runs
 * in the handler's context (see `patchQueryBuilders`): one made by an
 * {@link untransactedManager} runs out of it, on a connection of its own.
 */
function runningOutside<T extends object>(target: T): T {
  const methods = new Map<PropertyKey, unknown>();
  return new Proxy(target, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== 'function' || property === 'constructor') {
        return value;
      }
      let method = methods.get(property);
      if (method === undefined) {
        const original = value as (...args: unknown[]) => unknown;
        // Called on the proxy: what the method makes (a repository) holds
        // the proxy as its manager, and a query builder's methods that
        // return it return the proxy.
        method = function (this: unknown, ...args: unknown[]) {
          const made = outsideHandlerTransaction(() =>
            Reflect.apply(original, this, args),
          );
          return made !== this && isQueryBuilder(made)
            ? runningOutside(made)
            : made;
        };
        methods.set(property, method);
      }
      return method;
    },
  });
}

/** Whether `value` is a TypeORM query builder. */
function isQueryBuilder(value: unknown): value is object {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { obtainQueryRunner?: unknown }).obtainQueryRunner ===
      'function'
  );
}
