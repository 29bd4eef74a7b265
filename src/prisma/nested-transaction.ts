import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  PrismaIsolationLevel,
  PrismaTransactionOptions,
} from './prisma-client.js';

/** Prisma's `$transaction()`, in either of its forms. */
type $Transaction = (
  work: unknown,
  options?: PrismaTransactionOptions,
) => Promise<unknown>;

/**
 * What Prisma's query methods return (`PrismaPromise`), as its batch
 * transaction uses it: a query that runs when awaited, or in the
 * transaction it is given with `requestTransaction()`.
 */
interface PrismaQuery {
  requestTransaction(transaction: unknown): PromiseLike<unknown>;
}

/**
 * What a handle of Prisma's interactive transactions keeps, not in its
 * typings: `_createPrismaPromise()`, which makes a query of that
 * transaction, given the transaction (`{ kind: 'itx', id }`).
 */
interface InteractiveHandleInternals {
  _createPrismaPromise?(
    callback: (transaction: unknown) => Promise<unknown>,
  ): PromiseLike<unknown>;
}

/** What Prisma tells a batch given something else than its queries. */
const NOT_QUERIES =
  'All elements of the array need to be Prisma Client promises. Hint: Please make sure you are not awaiting the Prisma client calls you intended to pass in the $transaction function.';

/**
 * @internal `tx`, a handle of the handler's interactive transaction, whose
 * `$transaction()` is a savepoint of the handler's transaction in both of
 * Prisma's forms, and whose nested handles are the same:
 *
 * - `$transaction(fn, options)` is Prisma's own nested transaction; an
 *   isolation level is checked first by `checkLevel`, since a savepoint
 *   cannot change it and Prisma would run it at the handler's level
 *   without a word.
 * - `$transaction([queries], options)` runs the queries one after the
 *   other, in order, inside such a nested transaction, and resolves with
 *   their results: all of them commit with the handler's writes and the
 *   record, or none. Prisma's own batch would take a connection of the pool
 *   and commit at once, apart from the handler's transaction.
 *
 * Returns `tx` itself on a Prisma whose handles have no `$transaction()`.
 */
export function withNestedTransactions<Tx>(
  tx: Tx,
  checkLevel: (level: PrismaIsolationLevel) => Promise<void>,
): Tx {
  const nested = (tx as { $transaction?: unknown }).$transaction;
  if (typeof nested !== 'function') {
    return tx;
  }
  const $transaction: $Transaction = async (work, options) => {
    const queries = typeof work === 'function' ? undefined : asQueries(work);
    if (options?.isolationLevel !== undefined) {
      await checkLevel(options.isolationLevel);
    }
    if (queries?.length === 0) {
      return [];
    }
    return (nested as $Transaction).call(
      tx,
      queries
        ? (handle: unknown) => runIn(handle, queries)
        : (handle: unknown) =>
            (work as (handle: unknown) => unknown)(
              withNestedTransactions(handle, checkLevel),
            ),
      options,
    );
  };
  return new Proxy(tx as object, {
    get: (target, property) =>
      property === '$transaction'
        ? $transaction
        : (Reflect.get(target, property) as unknown),
  }) as Tx;
}

/**
 * The elements of a batch, checked as Prisma checks them before anything
 * runs.
 * @throws Error (Prisma's message) for an element that is not a query, or
 * for `work` that is not an array.
 */
function asQueries(work: unknown): PrismaQuery[] {
  if (!Array.isArray(work)) {
    throw new Error(NOT_QUERIES);
  }
  for (const element of work as unknown[]) {
    const query = element as
      | { [Symbol.toStringTag]?: unknown; requestTransaction?: unknown }
      | null
      | undefined;
    if (
      query?.[Symbol.toStringTag] !== 'PrismaPromise' ||
      typeof query.requestTransaction !== 'function'
    ) {
      throw new Error(NOT_QUERIES);
    }
  }
  return work as PrismaQuery[];
}

/**
 * Runs `queries` in order in the interactive transaction of `handle` (a
 * nested one: a savepoint), whichever client made them, as Prisma's batch
 * runs each in its own transaction; resolves with their results in order.
 * The transaction is reached through Prisma's internals (see
 * {@link InteractiveHandleInternals}): its public API runs a batch only in
 * a transaction of its own.
 * @throws IdempotencyConfigurationError on a Prisma whose handles keep
 * their transaction elsewhere, before any query runs.
 */
async function runIn(
  handle: unknown,
  queries: readonly PrismaQuery[],
): Promise<unknown[]> {
  const transaction = await transactionOf(handle);
  const results: unknown[] = [];
  for (const query of queries) {
    results.push(await query.requestTransaction(transaction));
  }
  return results;
}

/**
 * The transaction of an interactive handle, as Prisma's queries take it.
 * @throws IdempotencyConfigurationError when Prisma keeps it elsewhere.
 */
async function transactionOf(handle: unknown): Promise<unknown> {
  const make = (handle as InteractiveHandleInternals)._createPrismaPromise;
  const given = (
    typeof make === 'function'
      ? await make.call(handle, (transaction) => Promise.resolve(transaction))
      : undefined
  ) as { kind?: unknown; id?: unknown } | undefined;
  if (given?.kind !== 'itx' || given.id === undefined) {
    throw new IdempotencyConfigurationError(
      "A batch $transaction([...]) inside an @Idempotent() handler cannot join the handler's transaction on this version of Prisma, and Prisma would commit it on its own, apart from the idempotency record.",
      'Write it as a nested transaction of the handler’s: tx.$transaction(async (tx) => [await tx.payment.create(...), await tx.ledgerEntry.create(...)]).',
    );
  }
  return given;
}
