import type { DataSource } from 'typeorm';
import { handlerContexts } from '../core/handler-context.js';
import { handlerTransactionOf } from './ambient-transaction.js';
import type { LazyTransaction } from './lazy-transaction.js';

/**
 * @internal A transaction library that must see the transaction of a
 * decorated handler as its own current transaction while the handler runs
 * (nestjs-cls transactional, typeorm-transactional): so that its
 * `@Transactional()` joins it, its `MANDATORY` finds it, and its commit
 * hooks wait for its real commit.
 */
export interface TransactionParticipant {
  /** Runs `fn` with the library seeing `transaction` as the current one. */
  join<T>(transaction: LazyTransaction, fn: () => Promise<T>): Promise<T>;
}

/** The participants of each DataSource, added by the libraries' adapters. */
const participants = new WeakMap<DataSource, TransactionParticipant[]>();

/**
 * @internal Makes `participant` join the transaction of every decorated
 * handler on `dataSource`.
 */
export function addTransactionParticipant(
  dataSource: DataSource,
  participant: TransactionParticipant,
): void {
  participants.set(dataSource, [
    ...(participants.get(dataSource) ?? []),
    participant,
  ]);
}

/** @internal The participants of `dataSource`, in the order they were added. */
export function transactionParticipants(
  dataSource: DataSource,
): readonly TransactionParticipant[] {
  return participants.get(dataSource) ?? [];
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
