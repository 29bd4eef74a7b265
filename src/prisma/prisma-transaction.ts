import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  HandlerTransaction,
  HandlerTransactionState,
  TransactionListener,
} from '../interfaces/handler-transaction.interface.js';
import type { PostgresTransaction } from '../interfaces/postgres-adapter.interface.js';
import type { PoolTransaction } from '../pg/pool-transaction.js';
import { DriverConnection } from './driver-connection.js';
import { routeTo } from '../pg/routed-pool.js';
import {
  sqlLevel,
  type PrismaClientLike,
  type PrismaIsolationLevel,
} from './prisma-client.js';
import { withNestedTransactions } from './nested-transaction.js';
import { ownStatement } from '../core/own-statement.js';

/**
 * How much longer than the module's deadline Prisma's own timeout of the
 * interactive transaction runs: the module abandons the handler at its
 * deadline, and Prisma's timer is only a backstop behind it, which never
 * fires first.
 */
const PRISMA_TIMEOUT_GRACE_MS = 1_000;

/** Why the handler's interactive transaction is rolled back on Prisma's side. */
class HandlerTransactionEnded extends Error {
  constructor() {
    super("The idempotent request's transaction ended without a commit");
    this.name = 'HandlerTransactionEnded';
  }
}

/**
 * @internal The transaction of a decorated handler on Prisma: one of
 * Prisma's interactive transactions (`$transaction(async (tx) => ...)`),
 * held open while the handler runs, whose `tx` is the handler's handle
 * (`manager`). Prisma runs it on a {@link DriverConnection}, so that the
 * real transaction is the module's {@link PoolTransaction}, begun by the
 * handler's first statement: until then the request holds no connection.
 * The module's completion goes in it, on its connection; its COMMIT,
 * ROLLBACK and abandonment are the module's, after which Prisma's side
 * ends (committed or rolled back, with no statement of its own).
 */
export class PrismaHandlerTransaction<Tx>
  implements HandlerTransaction, PostgresTransaction
{
  private handle: Tx | undefined;
  /** The server's level of the transaction, once read (see `joinAt`). */
  private serverLevel: string | undefined;
  private opening: Promise<void> | undefined;
  /**
   * Ends Prisma's side, committed (`true`) or rolled back: Prisma's own
   * COMMIT or ROLLBACK, answered by the driver connection. Nothing waits
   * for it: the module's transaction has ended by then, and the answer
   * never waits on Prisma's bookkeeping.
   */
  private endPrisma!: (commit: boolean) => void;
  private readonly ending: Promise<boolean>;
  private readonly connection: DriverConnection;

  constructor(
    /** The real transaction, on the pool PrismaPg writes through. */
    private readonly transaction: PoolTransaction<Tx>,
    private readonly prisma: PrismaClientLike,
    /** When the request's time is up (epoch ms). */
    private readonly deadline: number,
  ) {
    this.connection = new DriverConnection(transaction.lazyClient);
    this.ending = new Promise((resolve) => {
      this.endPrisma = resolve;
    });
  }

  /**
   * The handler's handle: the `tx` of Prisma's interactive transaction.
   * @throws IdempotencyConfigurationError before the handler runs.
   */
  get manager(): Tx {
    if (this.handle === undefined) {
      throw new IdempotencyConfigurationError(
        'The Prisma transaction of an @Idempotent() handler was used before the handler ran: it is opened as the handler starts.',
        'Use IdempotencyContext.transaction in the code the handler runs.',
      );
    }
    return this.handle;
  }

  get state(): HandlerTransactionState {
    return this.transaction.state;
  }

  get client() {
    return this.transaction.client;
  }

  get began(): boolean {
    return this.transaction.began;
  }

  get failure(): Error | undefined {
    return this.transaction.failure;
  }

  get mark(): string | undefined {
    return this.transaction.mark;
  }

  get abortedBy(): unknown {
    return this.transaction.abortedBy;
  }

  onEnd(listener: TransactionListener): void {
    this.transaction.onEnd(listener);
  }

  seal(): Promise<void> {
    return this.transaction.seal();
  }

  endedUnderneath(): Promise<boolean> {
    return this.transaction.endedUnderneath();
  }

  /**
   * Opens Prisma's interactive transaction, which holds no connection, and
   * resolves once Prisma handed its `tx` over.
   * @throws IdempotencyConfigurationError when Prisma began it elsewhere
   * than on the module's pool; what Prisma threw when it could not.
   */
  open(): Promise<void> {
    this.opening ??= this.start();
    return this.opening;
  }

  /** The handler returned: what Prisma ends from now on is its own. */
  returned(): void {
    this.connection.returned();
  }

  commit(): Promise<void> {
    return this.end(() => this.transaction.commit(), true);
  }

  rollback(error?: unknown): Promise<boolean> {
    return this.end(() => this.transaction.rollback(error));
  }

  abandon(): Promise<void> {
    return this.end(() => this.transaction.abandon());
  }

  /**
   * Ends the module's transaction with `end`, then Prisma's side: committed
   * when `commit` and `end` did, else rolled back.
   */
  private async end<T>(end: () => Promise<T>, commit = false): Promise<T> {
    this.returned();
    let ended = false;
    try {
      const result = await end();
      ended = true;
      return result;
    } finally {
      this.endPrisma(commit && ended);
    }
  }

  private async start(): Promise<void> {
    // Prisma's timeouts run from now: neither cuts the handler short of
    // its deadline, and the module ends the transaction at the deadline.
    const wait = Math.max(1, this.deadline - Date.now());
    let handOver!: (tx: Tx) => void;
    const handedOver = new Promise<Tx>((resolve) => {
      handOver = resolve;
    });
    // @prisma/adapter-pg's startTransaction() takes its client with
    // `pool.connect()` in the async context of this `$transaction()` call
    // (then sends BEGIN through it): the routed pool hands it the driver
    // connection. The driver adapter and its transactions are private to
    // Prisma's engine: this is the one way in.
    let taken!: () => boolean;
    const result = routeTo(this.connection, (routed) => {
      taken = routed;
      return this.prisma.$transaction(
        async (tx) => {
          this.connection.running();
          handOver(tx as Tx);
          if (!(await this.ending)) {
            throw new HandlerTransactionEnded();
          }
        },
        { maxWait: wait, timeout: wait + PRISMA_TIMEOUT_GRACE_MS },
      );
    });
    // Its end is Prisma's, once the module ended the transaction.
    result.catch(() => undefined);
    const tx = await Promise.race([
      handedOver,
      // Prisma failed to begin it (it never hands it over then).
      result.then(() => handedOver),
    ]);
    if (!taken()) {
      this.endPrisma(false);
      throw new IdempotencyConfigurationError(
        'Prisma began the transaction of an @Idempotent() handler on a connection of its own, not on the pool the idempotency module uses: its writes would commit without their idempotency record.',
        'Give PrismaPg the application’s pg.Pool (`new PrismaPg(pool)`), and PrismaIdempotencyAdapter that same pool (its `poolToken`) or none.',
      );
    }
    this.handle = withNestedTransactions(tx, (level) => this.joinAt(level));
  }

  /**
   * Checks that a nested transaction at Prisma's `level` runs at it: the
   * transaction's own level, or, when the server's default applies, the
   * one the server reports.
   * @throws IdempotencyConfigurationError for another level.
   */
  private async joinAt(level: PrismaIsolationLevel): Promise<void> {
    let current: string | undefined = this.transaction.isolationLevel;
    if (current === undefined) {
      this.serverLevel ??= await ownStatement(async () => {
        const { rows } = await this.transaction.lazyClient.query(
          'SHOW transaction_isolation',
        );
        return String(
          (rows[0] as { transaction_isolation: string }).transaction_isolation,
        ).toUpperCase();
      });
      current = this.serverLevel;
    }
    if (current !== sqlLevel(level)) {
      throw new IdempotencyConfigurationError(
        `A $transaction() inside an @Idempotent() handler asked for isolation level ${level}, but it joins the handler's transaction (as a savepoint), which runs at ${current}: a savepoint cannot change it.`,
        `Set the level of the handler's transaction: @Idempotent({ isolationLevel: '${sqlLevel(level)}' }) on the route, or in the module's options.`,
        `Or run the work in a transaction of its own: IdempotencyContext.newTransaction('${sqlLevel(level)}', fn).`,
      );
    }
  }
}
