import { Logger } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import type { DataSource, EntityManager } from 'typeorm';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { loadOptionalPeer } from '../core/optional-peer.js';
import type { LazyTransaction } from './lazy-transaction.js';
import {
  inHandlerTransaction,
  outsideHandlerTransaction,
  type TransactionParticipant,
} from './transaction-participants.js';
import { messageOf } from '../core/error-message.js';

/**
 * Where `addTransactionalDataSource()` of typeorm-transactional 0.5 writes
 * the name it registered a DataSource under (its `TYPEORM_DATA_SOURCE_NAME`).
 */
const DATA_SOURCE_NAME = '@transactional/data-source';

/** Its module that holds the transactional context (not in its index). */
const CONTEXT_MODULE = 'typeorm-transactional/dist/common/index.js';

/** Its storage: a context of key/value pairs that follows async calls. */
interface StorageDriver {
  run<T>(cb: () => Promise<T>): Promise<T>;
}

/** What the module uses of typeorm-transactional's context module. */
interface TransactionalContext {
  getTransactionalContext(): StorageDriver;
  setEntityManagerByDataSourceName(
    context: StorageDriver,
    name: string,
    entityManager: EntityManager | null,
  ): void;
  setHookInContext(context: StorageDriver, emitter: EventEmitter | null): void;
  getTransactionalOptions(): { maxHookHandlers: number };
}

const logger = new Logger('Idempotency');

/**
 * @internal The name typeorm-transactional registered `dataSource` under
 * (`addTransactionalDataSource()`), or `undefined` when it did not.
 */
export function typeormTransactionalName(
  dataSource: DataSource,
): string | undefined {
  const name = (dataSource as unknown as Record<string, unknown>)[
    DATA_SOURCE_NAME
  ];
  return typeof name === 'string' ? name : undefined;
}

async function loadContext(): Promise<TransactionalContext> {
  let loaded:
    | (Partial<TransactionalContext> & {
        default?: Partial<TransactionalContext>;
      })
    | undefined;
  try {
    loaded = (await loadOptionalPeer(
      CONTEXT_MODULE,
      () => import(CONTEXT_MODULE),
    )) as typeof loaded;
  } catch (error) {
    throw new IdempotencyConfigurationError(
      `The DataSource was added to typeorm-transactional, whose context module could not be loaded: ${messageOf(error)}`,
      'Install typeorm-transactional 0.5 (npm install typeorm-transactional@^0.5).',
    );
  }
  if (!loaded) {
    throw new IdempotencyConfigurationError(
      'The DataSource was added to typeorm-transactional, which nestjs-idempotency cannot find: it is not installed next to nestjs-idempotency.',
      'Install typeorm-transactional 0.5 (npm install typeorm-transactional@^0.5).',
    );
  }
  const context = { ...loaded.default, ...loaded };
  if (
    typeof context.getTransactionalContext !== 'function' ||
    typeof context.setEntityManagerByDataSourceName !== 'function' ||
    typeof context.setHookInContext !== 'function' ||
    typeof context.getTransactionalOptions !== 'function'
  ) {
    throw new IdempotencyConfigurationError(
      'This version of typeorm-transactional is not supported by nestjs-idempotency.',
      'Use typeorm-transactional 0.5 (npm install typeorm-transactional@^0.5).',
    );
  }
  return context as TransactionalContext;
}

/**
 * @internal Makes typeorm-transactional 0.5 take the transaction of a
 * decorated handler on `dataSource` (registered under `name`) for its
 * current one: `@Transactional()` (`REQUIRED`, `SUPPORTS`, `MANDATORY`)
 * joins it, and `runOnTransactionCommit()` / `Rollback()` / `Complete()`
 * run after its real commit or rollback. `dataSource.transaction()` keeps
 * the meaning typeorm-transactional gives it, a transaction of its own
 * (`REQUIRES_NEW`, `NESTED`): it is begun outside of the handler's, on
 * another connection.
 *
 * @returns the participant, and what undoes the change to `dataSource`.
 */
export async function joinTypeormTransactional(
  dataSource: DataSource,
  name: string,
): Promise<{ participant: TransactionParticipant; undo: () => void }> {
  const library = await loadContext();
  const source = dataSource as unknown as Record<string, unknown>;
  const ownTransaction = Object.prototype.hasOwnProperty.call(
    source,
    'transaction',
  )
    ? source.transaction
    : undefined;
  const transaction = dataSource.transaction.bind(dataSource) as (
    ...args: unknown[]
  ) => Promise<unknown>;
  source.transaction = (...args: unknown[]) =>
    inHandlerTransaction(dataSource)
      ? outsideHandlerTransaction(() => transaction(...args))
      : transaction(...args);
  const participant: TransactionParticipant = {
    join<T>(lazy: LazyTransaction, fn: () => Promise<T>): Promise<T> {
      const context = library.getTransactionalContext();
      const hook = commitHook(lazy, library.getTransactionalOptions());
      // Its AsyncLocalStorage driver gives the outermost run() a context
      // that keeps nothing; a run() inside it keeps what is set.
      return context.run(() =>
        context.run(() => {
          library.setEntityManagerByDataSourceName(context, name, lazy.manager);
          library.setHookInContext(context, hook);
          return fn();
        }),
      );
    },
  };
  return {
    participant,
    undo: () => {
      if (ownTransaction === undefined) {
        delete source.transaction;
      } else {
        source.transaction = ownTransaction;
      }
    },
  };
}

/**
 * The emitter that typeorm-transactional's hooks listen on, told by the
 * handler's transaction when it really ended (as typeorm-transactional
 * tells its own: `commit` then `end`, or `rollback` then `end`).
 */
function commitHook(
  transaction: LazyTransaction,
  options: { maxHookHandlers: number },
): EventEmitter {
  const hook = new EventEmitter({ captureRejections: true });
  hook.setMaxListeners(options.maxHookHandlers);
  // A hook that returns a rejected promise: logged, like one that throws.
  (hook as unknown as Record<symbol, (error: Error) => void>)[
    Symbol.for('nodejs.rejection')
  ] = (error) => {
    logger.error(
      `A typeorm-transactional hook of an idempotent request failed (the request's outcome stands): ${error?.message ?? String(error)}`,
      error?.stack,
    );
  };
  transaction.onEnd((outcome) => {
    try {
      if (outcome.committed) {
        hook.emit('commit');
        hook.emit('end', undefined);
      } else {
        hook.emit('rollback', outcome.error);
        hook.emit('end', outcome.error);
      }
    } finally {
      hook.removeAllListeners();
    }
  });
  return hook;
}
