import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';

/**
 * @internal A transaction library that must see the transaction of a
 * decorated handler as its own current transaction while the handler runs
 * (nestjs-cls transactional, typeorm-transactional): so that its
 * `@Transactional()` joins it, its `MANDATORY` finds it, and its commit
 * hooks wait for its real commit.
 */
export interface TransactionParticipant<
  Transaction extends HandlerTransaction = HandlerTransaction,
> {
  /** Runs `fn` with the library seeing `transaction` as the current one. */
  join<T>(transaction: Transaction, fn: () => Promise<T>): Promise<T>;
}

/** The participants of each client of a data library, added by their adapters. */
const participants = new WeakMap<object, TransactionParticipant<never>[]>();

/**
 * @internal Makes `participant` join the transaction of every decorated
 * handler on `client` (a TypeORM DataSource, a PrismaClient, a Drizzle or
 * Kysely database, a pg Pool).
 */
export function addTransactionParticipant<
  Transaction extends HandlerTransaction,
>(client: object, participant: TransactionParticipant<Transaction>): void {
  participants.set(client, [
    ...(participants.get(client) ?? []),
    participant as TransactionParticipant<never>,
  ]);
}

/** @internal The participants of `client`, in the order they were added. */
export function transactionParticipants<Transaction extends HandlerTransaction>(
  client: object,
): readonly TransactionParticipant<Transaction>[] {
  return (participants.get(client) ??
    []) as readonly TransactionParticipant<Transaction>[];
}

/**
 * @internal Runs the handler, `fn`, with every participant seeing
 * `transaction` as its current one, the first added outermost.
 */
export function joinParticipants<Transaction extends HandlerTransaction, T>(
  joining: readonly TransactionParticipant<Transaction>[],
  transaction: Transaction,
  fn: () => Promise<T>,
): Promise<T> {
  return joining.reduceRight<() => Promise<T>>(
    (next, participant) => () => participant.join(transaction, next),
    fn,
  )();
}
