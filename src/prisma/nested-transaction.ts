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
 * Its queries refuse a batch of the PrismaClient itself (see
 * {@link keptInTransaction}); on a Prisma whose handles have no
 * `$transaction()`, that is all it changes.
 */
export function withNestedTransactions<Tx>(
  tx: Tx,
  checkLevel: (level: PrismaIsolationLevel) => Promise<void>,
): Tx {
  const nested = (tx as { $transaction?: unknown }).$transaction;
  if (typeof nested !== 'function') {
    return keptInTransaction(tx);
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
  return keptInTransaction(tx, $transaction);
}

/**
 * `tx`, a handle of the handler's interactive transaction (with
 * `$transaction` in place of its own, if given), whose queries refuse to
 * run in a batch transaction. Prisma runs a query in the transaction of the
 * batch it is given to, whichever handle made it: in
 * `prisma.$transaction([tx.payment.create(...)])` on the PrismaClient
 * itself, a statement of the handler's would commit on another connection,
 * apart from the record (and again at each retry). The batch then fails
 * before any of its queries runs, as Prisma fails one given something else
 * than its queries. The handle's own batch (`tx.$transaction([...])`) runs
 * them in the handler's transaction (see {@link runIn}).
 *
 * The queries are those the handle's methods return: its model delegates'
 * (`tx.payment.create()`) and its own (`tx.$executeRaw`), each checked as
 * it is made. The handle itself is left as Prisma made it: its layers are
 * the PrismaClient's, which a change would reach.
 */
function keptInTransaction<Tx>(tx: Tx, $transaction?: $Transaction): Tx {
  const members = new Map<string, { of: unknown; kept: unknown }>();
  return new Proxy(tx as object, {
    get: (target, property) => {
      if (property === '$transaction' && $transaction) {
        return $transaction;
      }
      const value = Reflect.get(target, property) as unknown;
      if (typeof property !== 'string' || property.startsWith('_')) {
        return value;
      }
      const known = members.get(property);
      if (known !== undefined && known.of === value) {
        return known.kept;
      }
      const kept =
        typeof value === 'function'
          ? makingQueries(value as (...args: unknown[]) => unknown)
          : typeof value === 'object' && value !== null
            ? delegateOf(value)
            : value;
      members.set(property, { of: value, kept });
      return kept;
    },
  }) as Tx;
}

/** A model delegate of the handle, whose queries refuse batches. */
function delegateOf(delegate: object): object {
  const methods = new Map<PropertyKey, { of: unknown; kept: unknown }>();
  return new Proxy(delegate, {
    get: (target, property) => {
      const value = Reflect.get(target, property) as unknown;
      if (typeof value !== 'function') {
        return value;
      }
      const known = methods.get(property);
      if (known !== undefined && known.of === value) {
        return known.kept;
      }
      const kept = makingQueries(value as (...args: unknown[]) => unknown);
      methods.set(property, { of: value, kept });
      return kept;
    },
  });
}

/** `method`, whose queries refuse to run in a batch transaction. */
function makingQueries(
  method: (...args: unknown[]) => unknown,
): (...args: unknown[]) => unknown {
  return function (this: unknown, ...args: unknown[]) {
    const made = method.apply(this, args);
    const query = made as
      | { [Symbol.toStringTag]?: unknown; requestTransaction?: unknown }
      | null
      | undefined;
    const request = query?.requestTransaction;
    if (
      query?.[Symbol.toStringTag] === 'PrismaPromise' &&
      typeof request === 'function'
    ) {
      try {
        query.requestTransaction = (transaction: unknown) => {
          if (
            (transaction as { kind?: unknown } | undefined)?.kind === 'batch'
          ) {
            throw new IdempotencyConfigurationError(
              "A query of the @Idempotent() handler's transaction was given to a batch $transaction([...]) of the PrismaClient itself, which would commit it on another connection, apart from the idempotency record.",
              "Run the batch on the handler's transaction: tx.$transaction([tx.payment.create(...), ...]), a savepoint of it.",
            );
          }
          return (request as (transaction: unknown) => unknown).call(
            query,
            transaction,
          );
        };
      } catch {
        // A query Prisma froze: left as it is.
      }
    }
    return made;
  };
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
