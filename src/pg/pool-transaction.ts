import { Logger } from '@nestjs/common';
import type { Pool, PoolClient, QueryResult } from 'pg';
import type {
  HandlerTransaction,
  HandlerTransactionState,
  TransactionListener,
} from '../interfaces/handler-transaction.interface.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';
import type { PostgresTransaction } from '../interfaces/postgres-adapter.interface.js';
import { ownStatement } from '../core/own-statement.js';
import {
  AbandonedTransactionError,
  TransactionClosedError,
  TransactionLostError,
  TransactionRolledBackError,
} from '../core/transaction.errors.js';
import { TransactionHooks } from '../core/transaction-hooks.js';
import {
  cancelStatement,
  runningStatement,
  type DriverClient,
} from './cancel-statement.js';
import { EndedUnderneath } from './ended-underneath.js';
import { StatementFailures } from './statement-failures.js';
import { OpenSavepoints } from './open-savepoints.js';
import type { TransactionGate } from './transaction-gate.js';
import { messageOf } from '../core/error-message.js';

const logger = new Logger('Idempotency');

type Phase = 'idle' | 'open' | 'ended' | 'abandoned';

/**
 * @internal The client a data library writes a handler's transaction
 * through, in place of a node-postgres `PoolClient` (Drizzle's and Kysely's
 * node-postgres dialects take one): its first statement takes a connection
 * of the pool and begins the transaction; every statement then goes on that
 * connection, and none once the transaction ended. `release()` does
 * nothing: the module gives the connection back when the transaction ends.
 */
export interface LazyPoolClient {
  query(...args: unknown[]): Promise<QueryResult>;
  release(): void;
}

/**
 * @internal The transaction of a decorated handler on a node-postgres pool,
 * begun by its first statement: until then the request holds no connection,
 * so a handler that waits on a gateway first holds nothing while it waits.
 * The data library's handle of it (`manager`) is made, on first use, by
 * `handleOf` from the {@link LazyPoolClient}.
 *
 * It takes a place in the module's share of the pool before its connection
 * (see {@link TransactionGate}); a statement it sees end the transaction
 * underneath it (a `COMMIT` sent by hand, a library's own transaction on its
 * connection: the server then says the session is in no transaction block)
 * makes every later statement, and the completion, fail.
 */
export class PoolTransaction<Handle>
  implements HandlerTransaction, PostgresTransaction
{
  private phase: Phase = 'idle';
  private connection: PoolClient | undefined;
  private opening: Promise<PoolClient> | undefined;
  private holdsPlace = false;
  private broken = false;
  /**
   * Set as the module sends its COMMIT or ROLLBACK: from then on the
   * handler's statements (work it did not await, a branch still running
   * beside one that failed) are refused, as they are once it has ended,
   * instead of running after it on the same connection, outside of any
   * transaction.
   */
  private closing = false;
  private readonly underneath = new EndedUnderneath();
  private readonly savepoints = new OpenSavepoints();
  private readonly failures = new StatementFailures();
  private handle: Handle | undefined;
  private readonly hooks = new TransactionHooks();
  private readonly onError = () => {
    this.broken = true;
  };
  /** What the handler's data library writes through. */
  readonly lazyClient: LazyPoolClient = {
    query: (...args: unknown[]) => this.query(args),
    release: () => undefined,
  };

  constructor(
    private readonly pool: Pool,
    private readonly gate: TransactionGate,
    /** When the request's time is up (epoch ms): no place is awaited past it. */
    private readonly deadline: number,
    /** The level it begins with; `undefined`: the server's default. */
    readonly isolationLevel: IdempotencyIsolationLevel | undefined,
    private readonly handleOf: (client: LazyPoolClient) => Handle,
  ) {}

  /** The data library's handle of the transaction, as the handler gets it. */
  get manager(): Handle {
    this.handle ??= this.handleOf(this.lazyClient);
    return this.handle;
  }

  get began(): boolean {
    return this.phase !== 'idle' || this.opening !== undefined;
  }

  /** The connection while the transaction is open on it. */
  get client(): PoolClient | undefined {
    const client = this.phase === 'open' ? this.connection : undefined;
    return client && !this.broken && !this.underneath.on(client)
      ? client
      : undefined;
  }

  get failure(): Error | undefined {
    return this.underneath.error;
  }

  get abortedBy(): unknown {
    return this.failures.last;
  }

  get mark(): string | undefined {
    return this.underneath.mark;
  }

  get state(): HandlerTransactionState {
    switch (this.phase) {
      case 'idle':
        return this.opening ? 'open' : 'idle';
      case 'open':
        return this.broken || this.underneath.on(this.connection!)
          ? 'lost'
          : 'open';
      default:
        return 'ended';
    }
  }

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

  async commit(): Promise<void> {
    let failure: Error | undefined;
    try {
      if (this.opening) {
        await this.opening;
      }
      const client = this.client;
      if (this.began && !client) {
        throw this.underneath.error ?? new TransactionLostError();
      }
      if (client) {
        this.closing = true;
        this.savepoints.refuseCommit();
        this.underneath.committing = true;
        // After a failed statement the server answers `ROLLBACK`, with no
        // error: nothing committed.
        const { command } = await client.query('COMMIT');
        if (command !== 'COMMIT') {
          throw new TransactionRolledBackError();
        }
      }
    } catch (error) {
      // The session may be gone, or the transaction still open on it: the
      // connection is closed rather than handed to another request.
      failure = error instanceof Error ? error : new Error(String(error));
      throw error;
    } finally {
      this.end('ended', failure);
    }
    this.hooks.end({ committed: true });
  }

  rollback(error?: unknown): Promise<boolean> {
    return this.rollbackAs('ended', error);
  }

  async abandon(): Promise<void> {
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

  private async rollbackAs(
    phase: 'ended' | 'abandoned',
    error: unknown,
  ): Promise<boolean> {
    if (phase === 'abandoned') {
      this.phase = 'abandoned';
    }
    this.closing = true;
    await this.opening?.catch(() => undefined);
    const client = this.broken ? undefined : this.connection;
    let failure: Error | undefined;
    try {
      await client?.query('ROLLBACK');
      return !this.broken;
    } catch (rollbackError) {
      failure = rollbackError as Error;
      logger.warn(`Rollback failed: ${failure.message}`);
      return false;
    } finally {
      this.end(phase, failure);
      this.hooks.end({ committed: false, error });
    }
  }

  /**
   * Gives the connection back; a broken one, or one whose COMMIT or
   * ROLLBACK failed, is closed instead.
   */
  private end(phase: 'ended' | 'abandoned', failure?: Error): void {
    if (this.phase !== 'abandoned') {
      this.phase = phase;
    }
    const client = this.connection;
    this.connection = undefined;
    if (client) {
      client.removeListener('error', this.onError);
      client.release(
        failure ?? (this.broken ? new TransactionLostError() : undefined),
      );
    }
    if (this.holdsPlace) {
      this.holdsPlace = false;
      this.gate.release();
    }
  }

  private async query(args: unknown[]): Promise<QueryResult> {
    const client = (await this.connect()) as unknown as {
      query(...args: unknown[]): Promise<QueryResult>;
    };
    // Checked again where the statement is sent: the module may have sent
    // its COMMIT or ROLLBACK meanwhile, which the statement must not follow.
    if (this.closing) {
      throw this.closedError();
    }
    this.savepoints.see(args[0]);
    return this.failures.watch(client.query(...args));
  }

  /** Why a statement of the handler is refused once the transaction ends. */
  private closedError(): Error {
    return this.phase === 'abandoned'
      ? new AbandonedTransactionError()
      : new TransactionClosedError();
  }

  /** The open transaction's connection, begun by the first statement. */
  private connect(): Promise<PoolClient> {
    if (this.closing) {
      return Promise.reject(this.closedError());
    }
    if (this.phase === 'open') {
      const client = this.connection!;
      if (this.broken) {
        return Promise.reject(new TransactionLostError());
      }
      return this.underneath.on(client)
        ? Promise.reject(this.underneath.error!)
        : Promise.resolve(client);
    }
    if (this.phase !== 'idle') {
      return Promise.reject(this.closedError());
    }
    this.opening ??= this.open();
    return this.opening;
  }

  /**
   * Takes a place in the module's share of the pool, the connection, and
   * begins the transaction: statements of the module's own (their errors
   * are the database's, not the handler's).
   */
  private async open(): Promise<PoolClient> {
    try {
      return await ownStatement(async () => {
        await this.gate.acquire(this.deadline - Date.now());
        this.holdsPlace = true;
        if (this.phase !== 'idle') {
          throw new AbandonedTransactionError();
        }
        const client = await this.pool.connect();
        this.connection = client;
        client.on('error', this.onError);
        await client.query(this.underneath.begin(this.isolationLevel));
        if (this.phase !== 'idle') {
          throw new AbandonedTransactionError();
        }
        this.phase = 'open';
        return client;
      });
    } finally {
      this.opening = undefined;
    }
  }
}
