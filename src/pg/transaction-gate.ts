import { Logger } from '@nestjs/common';
import { TransactionSlotTimeoutError } from '../core/transaction.errors.js';

/**
 * @internal How many handler transactions may be open at once: one fewer
 * than the pool's connections. A handler holds its connection while a step,
 * a claim or a completion of another request borrows one for a moment; were
 * every connection held by a handler, those would wait for a connection that
 * only they can free.
 */
export class TransactionGate {
  private open = 0;
  /** Transactions waiting for one of the others to end. */
  private readonly queued: Array<() => void> = [];

  constructor(readonly capacity: number) {}

  /** The transactions open now. */
  get size(): number {
    return this.open;
  }

  /**
   * Takes a place if one is free now, without waiting.
   * @returns whether it took one.
   */
  tryAcquire(): boolean {
    if (this.open < this.capacity) {
      this.open += 1;
      return true;
    }
    return false;
  }

  /**
   * Takes a place, waiting at most `waitMs` for one to come free.
   * @throws TransactionSlotTimeoutError when none came free in time.
   */
  async acquire(waitMs: number): Promise<void> {
    if (this.tryAcquire()) {
      return;
    }
    // The transaction that ends hands its place over (see release()).
    await new Promise<void>((resolve, reject) => {
      const waiter = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(
        () => {
          this.queued.splice(this.queued.indexOf(waiter), 1);
          reject(new TransactionSlotTimeoutError(waitMs, this.capacity));
        },
        Math.max(0, waitMs),
      ).unref();
      this.queued.push(waiter);
    });
  }

  /** Gives a place back, to the next waiter if there is one. */
  release(): void {
    const next = this.queued.shift();
    if (next) {
      next();
    } else {
      this.open -= 1;
    }
  }
}

/**
 * @internal The gate of a pool of `poolSize` connections (its `max`, as
 * node-postgres keeps it): one fewer transaction than connections; no gate
 * when the size is unknown. A pool of one connection gets no gate (no
 * handler transaction could open), and a warning: while a handler's
 * transaction holds that connection, the module can neither renew the
 * request's lease (a handler that outlives it can be taken over by a
 * duplicate, which then runs beside it) nor save a step.
 */
export function poolTransactionGate(
  poolSize: unknown,
  logger = new Logger('Idempotency'),
): TransactionGate {
  if (typeof poolSize !== 'number') {
    return new TransactionGate(Infinity);
  }
  if (poolSize < 2) {
    logger.warn(
      `The pool the idempotency module writes through has ${poolSize} connection: while a handler's transaction holds it, the module cannot renew the request's lease (a handler that outlives its lease can be taken over by a duplicate, which runs beside it), nor save a step of the handler's (it waits until transactionTimeout). Give the pool at least 2 connections (max).`,
    );
    return new TransactionGate(Infinity);
  }
  return new TransactionGate(poolSize - 1);
}
