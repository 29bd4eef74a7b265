import { Logger } from '@nestjs/common';
import type { PoolClient } from 'pg';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';
import type {
  HandlerTransaction,
  HandlerTransactionState,
  TransactionListener,
} from '../interfaces/handler-transaction.interface.js';
import { ownStatement, ownStatementError } from '../core/own-statement.js';
import {
  AbandonedTransactionError,
  TransactionClosedError,
  TransactionLostError,
  TransactionRolledBackError,
} from '../core/transaction.errors.js';
import { TransactionHooks } from '../core/transaction-hooks.js';
import { handlerContexts } from '../core/handler-context.js';
import { EndedUnderneath } from '../pg/ended-underneath.js';
import { OpenSavepoints } from '../pg/open-savepoints.js';
import { StatementFailures } from '../pg/statement-failures.js';
import type { TransactionGate } from '../pg/transaction-gate.js';
import {
  cancelStatement,
  runningStatement,
  type DriverClient,
} from '../pg/cancel-statement.js';

import type {
  LazyQueryRunner,
  LazyQueryRunners,
  LazyRunnerOwner,
} from './lazy-query-runner.js';
import { messageOf } from '../core/error-message.js';

type State = 'idle' | 'open' | 'ended' | 'abandoned';

/**
 * The connection of a handler's transaction as its TypeORM runner sends
 * statements on it (`query()`, all the runner uses of it), each checked
 * by the transaction as it is sent. An object of its own, not one made
 * from the connection: a connection made a prototype would change shape
 * for the driver.
 */
class GuardedClient {
  constructor(
    private readonly transaction: LazyTransaction,
    private readonly client: PoolClient,
  ) {}

  query(...args: unknown[]): unknown {
    const refused = this.transaction.refuses(args[0]);
    if (refused) {
      throw refused;
    }
    this.transaction.savepoints.see(args[0]);
    const sent = this.transaction.failures.watch(
      (this.client as unknown as { query(...args: unknown[]): unknown }).query(
        ...args,
      ),
    );
    // A COMMIT the server answered as such: after a failed statement, it
    // answers `ROLLBACK`, with no error.
    return args[0] === 'COMMIT'
      ? (sent as Promise<{ command?: string }>).then((result) => {
          this.transaction.commitAnswered(result.command === 'COMMIT');
          return result;
        })
      : sent;
  }
}

const logger = new Logger('Idempotency');

/**
 * @internal The transaction of a decorated handler, begun by its first
 * statement. Until then the request holds no connection: a handler that
 * waits on a gateway first holds nothing while it waits.
 *
 * Its query runner is created on first use and begins the transaction when
 * it first asks the pool for its connection, after taking a place in the
 * module's share of the pool (see {@link TransactionGate}).
 */
export class LazyTransaction implements HandlerTransaction, LazyRunnerOwner {
  private runner: LazyQueryRunner | undefined;
  private phase: State = 'idle';
  /**
   * Set as the module rolls back, or sends its COMMIT: from then on the
   * handler's statements (work it did not await, a branch still running
   * beside one that failed) are refused, as they are once it has ended,
   * instead of running after it on the same connection, outside of any
   * transaction.
   */
  private closing = false;
  /** Set while TypeORM commits for the module: its COMMIT is the module's. */
  private committing = false;
  /** Set once the module's COMMIT went through. */
  private committed = false;
  /** The server answered the module's COMMIT with a ROLLBACK. */
  private rolledBack = false;
  /** The connection as the runner's statements get it (see {@link guard}). */
  private guarded: GuardedClient | undefined;
  private opening: Promise<PoolClient> | undefined;
  private holdsPlace = false;
  private readonly hooks = new TransactionHooks();
  /** The level the transaction runs at, once read from the server. */
  private serverLevel: string | undefined;
  private readonly underneath = new EndedUnderneath();
  /** @internal The savepoints its statements left open. */
  readonly savepoints = new OpenSavepoints();
  /** @internal What failed of its statements: what aborted it, if anything. */
  readonly failures = new StatementFailures();

  constructor(
    /** The DataSource whose connection it holds. */
    readonly dataSource: DataSource,
    /** Makes its query runner, on `dataSource`. */
    private readonly runners: LazyQueryRunners,
    private readonly gate: TransactionGate,
    /** When the request's time is up (epoch ms): no place is awaited past it. */
    private readonly deadline: number,
    /**
     * The level it begins with; `undefined`: the server's default (the
     * DataSource's `isolationLevel` option is applied by the caller).
     */
    readonly isolationLevel?: IdempotencyIsolationLevel,
  ) {}

  /**
   * The transaction's connection, once it has begun, while the transaction
   * is open on it.
   */
  get client(): PoolClient | undefined {
    const client =
      this.phase === 'open' && this.runner && !this.runner.isReleased
        ? this.runner.databaseConnection
        : undefined;
    return client && !this.underneath.on(client) ? client : undefined;
  }

  /** Why it is no longer open, when it was ended underneath the module. */
  get failure(): Error | undefined {
    return this.underneath.error;
  }

  get abortedBy(): unknown {
    return this.failures.last;
  }

  /** The mark of the transaction the module began (see {@link EndedUnderneath.begin}). */
  get mark(): string | undefined {
    return this.underneath.mark;
  }

  /**
   * Why a statement of the handler is refused once the transaction was
   * committed, rolled back or abandoned; `undefined` while it is idle or
   * open.
   */
  get closed(): Error | undefined {
    switch (this.phase) {
      case 'abandoned':
        return new AbandonedTransactionError();
      case 'ended':
        return new TransactionClosedError();
      default:
        return this.closing ? new TransactionClosedError() : undefined;
    }
  }

  /**
   * @internal Why its runner refuses to send `sql`, if it does: the COMMIT
   * of the module's commit goes, and closes the transaction to every
   * statement after it.
   */
  refuses(sql: unknown): Error | undefined {
    // The module's commit runs out of the handler's context: its COMMIT,
    // and TypeORM's subscribers around it (after it, in autocommit, as
    // ever); the handler's own work still running is refused.
    if (this.committing) {
      // Nothing of the handler's own once the module commits: a statement
      // sent then (a savepoint) could change what TypeORM's commit sends.
      if (handlerContexts.getStore()?.transaction === this) {
        return this.closed ?? new TransactionClosedError();
      }
      if (sql === 'COMMIT' && this.phase === 'open') {
        this.closing = true;
      }
      return undefined;
    }
    return this.closed;
  }

  /**
   * @internal Told how the server answered a COMMIT sent for it: `true` when
   * it committed, `false` when it answered `ROLLBACK` (a statement had
   * failed).
   */
  commitAnswered(committed: boolean): void {
    if (this.committing) {
      this.committed = committed;
      this.rolledBack = !committed;
    }
  }

  /**
   * Whether a statement began the transaction, whatever became of it since
   * (open, lost, ended or abandoned): from then on, what the module writes
   * for the attempt goes in it or nowhere.
   */
  get began(): boolean {
    return this.phase !== 'idle' || this.opening !== undefined;
  }

  /** What became of it, as the request sequence sees it. */
  get state(): HandlerTransactionState {
    switch (this.phase) {
      case 'idle':
        return this.opening ? 'open' : 'idle';
      case 'open':
        // TypeORM releases the runner of a connection that broke.
        return this.runner?.isReleased === true ||
          this.underneath.error ||
          (this.runner?.databaseConnection &&
            this.underneath.on(this.runner.databaseConnection))
          ? 'lost'
          : 'open';
      default:
        return 'ended';
    }
  }

  /** The manager of the transaction, as the handler's code sees it. */
  get manager(): EntityManager {
    return this.queryRunner.manager;
  }

  /** The query runner of the transaction. */
  get queryRunner(): QueryRunner {
    this.runner ??= this.runners(this);
    return this.runner;
  }

  /**
   * Adds what runs once the transaction has ended, committed or rolled
   * back (see {@link TransactionHooks}).
   * @throws IdempotencyConfigurationError once it has ended.
   */
  onEnd(listener: TransactionListener): void {
    this.hooks.add(listener);
  }

  endedUnderneath(): Promise<boolean> {
    const client = this.client;
    const sent = this.savepoints.endSent;
    return client
      ? this.underneath.check(client, sent)
      : Promise.resolve(sent || this.state === 'lost');
  }

  async seal(): Promise<void> {
    while (this.phase === 'idle' && this.opening) {
      await this.opening.catch(() => undefined);
    }
    if (this.phase === 'idle') {
      this.closing = true;
    }
  }

  /**
   * Commits what the handler wrote, if it wrote anything, and gives the
   * connection back; then runs the hooks of a commit. A commit that failed
   * has the pool close the connection rather than take it back.
   */
  async commit(): Promise<void> {
    let failure: Error | undefined;
    try {
      if (this.opening) {
        // A statement still opening the transaction is one of the handler's.
        await this.opening;
      }
      if (this.began && !this.client) {
        // Lost or ended: the handler's writes are gone.
        throw this.underneath.error ?? new TransactionLostError();
      }
      if (this.client && this.runner?.isTransactionActive) {
        this.closing = true;
        this.savepoints.refuseCommit();
        this.underneath.committing = true;
        this.committing = true;
        await this.runner.commitTransaction();
        if (!this.committed) {
          // No COMMIT went through: TypeORM sent none (only the release of
          // the savepoint of a transaction the handler left open), or the
          // server answered it with a ROLLBACK. The connection is closed,
          // never pooled inside the transaction.
          throw this.rolledBack
            ? new TransactionRolledBackError()
            : new TransactionLostError();
        }
      }
    } catch (error) {
      if (this.committed) {
        // A subscriber of TypeORM's failed after the COMMIT: the
        // transaction committed all the same.
        logger.warn(
          `A TypeORM subscriber failed after the commit of an idempotent request (its outcome stands): ${messageOf(error)}`,
        );
        // Closed rather than pooled: the subscriber may have left a
        // transaction of its own open on it.
        await this.end(
          'ended',
          error instanceof Error ? error : new Error(String(error)),
        );
        this.hooks.end({ committed: true });
        return;
      }
      // The server may have ended the session in answer to the COMMIT (an
      // administrator's termination, a shutdown), before the driver has
      // seen its socket close: taken back, the connection would be the
      // next one the pool hands out, to the claim's release among others,
      // which would fail on it and leave the key claimed until its lease
      // ends. Or the COMMIT was never sent (a subscriber of TypeORM's
      // refused it), and the transaction is still open on it.
      failure = error instanceof Error ? error : new Error(String(error));
      throw error;
    } finally {
      await this.end('ended', failure);
    }
    this.hooks.end({ committed: true });
  }

  /**
   * Rolls back and gives the connection back; then runs the hooks of a
   * rollback, with `error`, what made it roll back. Never throws: a
   * connection that broke has rolled back on the server already.
   * @returns false when the rollback failed: the transaction was lost.
   */
  rollback(error?: unknown): Promise<boolean> {
    return this.rollbackAs('ended', error);
  }

  private async rollbackAs(
    state: 'ended' | 'abandoned',
    error: unknown,
  ): Promise<boolean> {
    const opening = this.opening;
    if (state === 'abandoned') {
      this.phase = 'abandoned';
    }
    this.closing = true;
    await opening?.catch(() => undefined);
    const { runner } = this;
    const client =
      runner && !runner.isReleased && runner.isTransactionActive
        ? runner.databaseConnection
        : undefined;
    let failure: Error | undefined;
    try {
      // On the driver's client: TypeORM's ROLLBACK would ask the runner for
      // its connection, which an abandoned transaction refuses.
      await client?.query('ROLLBACK');
      if (runner) {
        runner.isTransactionActive = false;
        runner.transactionDepth = 0;
      }
      return true;
    } catch (error) {
      failure = error as Error;
      logger.warn(`Rollback failed: ${failure.message}`);
      return false;
    } finally {
      await this.end(state, failure);
      this.hooks.end({ committed: false, error });
    }
  }

  /**
   * Abandons the transaction at the request's deadline: cancels the
   * statement it runs, if any, rolls back, and makes every later statement
   * of the handler fail.
   */
  async abandon(): Promise<void> {
    // Read while the transaction is still open: `client` is undefined after.
    const client = this.client as unknown as DriverClient | undefined;
    this.phase = 'abandoned';
    if (client && runningStatement(client)) {
      try {
        cancelStatement(client);
      } catch (error) {
        logger.warn(
          `Cancelling the statement of an abandoned request failed: ${messageOf(error)}`,
        );
      }
    }
    await this.rollbackAs('abandoned', new AbandonedTransactionError());
  }

  /**
   * Gives the connection back; after `failure` (a rollback or a commit that
   * failed), the pool destroys it instead of handing it, in an unknown
   * state, to another request.
   */
  private async end(
    state: 'ended' | 'abandoned',
    failure?: Error,
  ): Promise<void> {
    if (this.phase !== 'abandoned') {
      this.phase = state;
    }
    if (this.runner && !this.runner.isReleased) {
      try {
        await this.runner.releasePostgresConnection(failure);
      } catch (error) {
        logger.warn(`Releasing a connection failed: ${messageOf(error)}`);
      }
    }
    if (this.holdsPlace) {
      this.holdsPlace = false;
      this.gate.release();
    }
  }

  /**
   * @internal The connection its runner asks for: the first statement takes
   * a place and the connection, and begins the transaction; once it has
   * ended (or was ended underneath the module), refused.
   */
  connectRunner(runner: LazyQueryRunner): Promise<PoolClient> {
    // The module's COMMIT, let through by `refuses()`, asks for it too.
    const closed =
      this.committing && this.phase === 'open' ? undefined : this.closed;
    if (closed) {
      return Promise.reject(closed);
    }
    if (this.phase === 'open') {
      const client = runner.databaseConnection;
      if (!client) {
        return runner.connectToPool();
      }
      return this.underneath.on(client)
        ? Promise.reject(this.underneath.error!)
        : Promise.resolve(this.guard(client));
    }
    this.opening ??= this.open(runner);
    return this.opening;
  }

  /**
   * The transaction's connection as its runner's statements get it: each
   * is checked as it is sent (as the driver queues it, with no await
   * between), so that none follows the module's ROLLBACK or COMMIT on the
   * connection, outside of any transaction, whatever TypeORM still awaited
   * between its runner's check and the send (a branch of the handler still
   * writing beside one that failed). Made once a transaction.
   */
  private guard(client: PoolClient): PoolClient {
    this.guarded ??= new GuardedClient(this, client);
    return this.guarded as unknown as PoolClient;
  }

  /**
   * Checks that a savepoint asking for isolation level `level` runs at it:
   * the transaction's own level, or, when the server's default applies,
   * the one the server reports.
   * @throws IdempotencyConfigurationError for another level.
   * @internal
   */
  async joinAt(level: string): Promise<void> {
    let current: string | undefined = this.isolationLevel;
    if (current === undefined) {
      this.serverLevel ??= await ownStatement(async () => {
        const client = (await this.queryRunner.connect()) as PoolClient;
        const { rows } = await client.query<{ transaction_isolation: string }>(
          'SHOW transaction_isolation',
        );
        return rows[0].transaction_isolation.toUpperCase();
      });
      current = this.serverLevel;
    }
    if (current !== level.toUpperCase()) {
      throw new IdempotencyConfigurationError(
        `A transaction inside an @Idempotent() handler asked for isolation level ${level}, but it joins the handler's transaction (as a savepoint), which runs at ${current}: a savepoint cannot change it.`,
        `Set the level of the handler's transaction: @Idempotent({ isolationLevel: '${level}' }) on the route, or in the module's options.`,
        `Or run the work in a transaction of its own: IdempotencyContext.newTransaction('${level}', fn).`,
      );
    }
  }

  /**
   * Takes a place in the module's share of the pool, the connection, and
   * begins the transaction: statements of the module's own (their errors
   * are the database's, not the handler's).
   */
  private async open(runner: LazyQueryRunner): Promise<PoolClient> {
    try {
      if (!this.gate.tryAcquire()) {
        await this.gate.acquire(this.deadline - Date.now());
      }
      this.holdsPlace = true;
      if (this.phase !== 'idle') {
        throw new AbandonedTransactionError();
      }
      const client = await runner.connectToPool();
      // Sent on the driver's client: TypeORM's own START TRANSACTION would
      // ask for the connection again, which is what is being opened.
      await client.query(this.underneath.begin(this.isolationLevel));
      if (this.phase !== 'idle') {
        throw new AbandonedTransactionError();
      }
      this.phase = 'open';
      return this.guard(client);
    } catch (error) {
      throw ownStatementError(error);
    } finally {
      this.opening = undefined;
    }
  }
}
