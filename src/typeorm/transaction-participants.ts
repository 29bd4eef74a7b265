import type { DataSource } from 'typeorm';
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
