import { Logger } from '@nestjs/common';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { handlerContexts } from './handler-context.js';
import type {
  TransactionListener,
  TransactionOutcome,
} from '../interfaces/handler-transaction.interface.js';
import { messageOf } from './error-message.js';

const logger = new Logger('Idempotency');

/**
 * @internal What runs once a handler's transaction has ended: the
 * `afterCommit()` callbacks of `IdempotencyContext`, and the commit and
 * rollback hooks of the transaction libraries that joined it.
 *
 * They run after the COMMIT (or the ROLLBACK) returned, one after the
 * other in the order they were added, outside of the handler's transaction
 * and without delaying the response: what they throw is logged, and never
 * changes the outcome of the request.
 */
export class TransactionHooks {
  /** The listeners added (none yet: most transactions get none). */
  private listeners: TransactionListener[] | undefined = undefined;
  private ended = false;

  /**
   * Adds a listener.
   * @throws IdempotencyConfigurationError once the transaction has ended.
   */
  add(listener: TransactionListener): void {
    if (this.ended) {
      throw new IdempotencyConfigurationError(
        "A commit hook was added after the @Idempotent() handler's transaction ended.",
        'Add it while the handler runs: await the work that adds it before the handler returns.',
      );
    }
    (this.listeners ??= []).push(listener);
  }

  /** Tells the listeners, once, how the transaction ended. */
  end(outcome: TransactionOutcome): void {
    const listeners = this.listeners;
    this.ended = true;
    this.listeners = undefined;
    if (!listeners) {
      return;
    }
    // Out of the handler's context (its transaction is gone), and after the
    // current I/O: never before the module's own work of the request.
    handlerContexts.exit(() =>
      setImmediate(() => void run(listeners, outcome)),
    );
  }
}

async function run(
  listeners: TransactionListener[],
  outcome: TransactionOutcome,
): Promise<void> {
  for (const listener of listeners) {
    try {
      await listener(outcome);
    } catch (error) {
      logger.error(
        `A hook after the ${outcome.committed ? 'commit' : 'rollback'} of an idempotent request failed (the request's outcome stands): ${messageOf(error)}`,
        (error as Error)?.stack,
      );
    }
  }
}
