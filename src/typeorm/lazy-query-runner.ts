import type { PoolClient } from 'pg';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';

/** What TypeORM keeps of a runner's transaction, as the module sets it. */
export interface RunnerInternals {
  isTransactionActive: boolean;
  transactionDepth: number;
  databaseConnection?: PoolClient;
  readonly isReleased: boolean;
  connect(): Promise<PoolClient>;
  query(...args: unknown[]): Promise<unknown>;
  startTransaction(isolationLevel?: unknown): Promise<void>;
  /** TypeORM's: gives the connection back (the module's runner: nothing). */
  release(): Promise<void>;
  /** Gives the connection back, or, with an error, has the pool close it. */
  releasePostgresConnection(error?: Error): Promise<void>;
}

/** @internal The transaction a {@link LazyQueryRunner} runs for. */
export interface LazyRunnerOwner {
  /**
   * The connection the runner asks for: taken from the pool, and the
   * transaction begun on it, by the first statement; refused once the
   * transaction has ended.
   */
  connectRunner(runner: LazyQueryRunner): Promise<PoolClient>;
  /**
   * Checks that a transaction the handler opens itself (a savepoint) at
   * isolation level `level` runs at it.
   * @throws IdempotencyConfigurationError for another level.
   */
  joinAt(level: string): Promise<void>;
  /**
   * Why the runner's statement `sql` is refused: the transaction is being
   * or was committed, rolled back or abandoned.
   */
  refuses(sql: unknown): Error | undefined;
}

/**
 * @internal The query runner of a handler's transaction: TypeORM's runner of
 * the DataSource's driver, which asks its owner for its connection.
 */
export type LazyQueryRunner = QueryRunner &
  RunnerInternals & {
    readonly owner: LazyRunnerOwner;
    /** The pool's connection, taken as TypeORM's own runner takes it. */
    connectToPool(): Promise<PoolClient>;
  };

/** @internal Makes the query runner of a handler's transaction. */
export type LazyQueryRunners = (owner: LazyRunnerOwner) => LazyQueryRunner;

type RunnerClass = new (driver: unknown, mode: string) => RunnerInternals;
type ManagerClass = new (
  dataSource: DataSource,
  queryRunner: unknown,
) => {
  readonly queryRunner?: unknown;
  transaction(...args: unknown[]): Promise<unknown>;
};

/**
 * @internal The query runners of handler transactions on `dataSource`:
 * classes made once for it, extending the runner and the manager TypeORM
 * makes for its driver, so that a request's runner and manager get no
 * function of their own (each would be an object of another shape to
 * TypeORM's code, and closures made for each request).
 *
 * TypeORM has no public way to give a runner its connection: its runner's
 * `connect()` (which takes one from the pool) and `startTransaction()` are
 * overridden, and the classes are read from a runner made, never connected,
 * by `createQueryRunner()`.
 */
export function lazyQueryRunners(dataSource: DataSource): LazyQueryRunners {
  const sample = dataSource.createQueryRunner();
  const Runner = sample.constructor as RunnerClass;
  const Manager = sample.manager.constructor as ManagerClass;
  const { driver } = dataSource;

  class LazyRunner extends Runner {
    constructor(readonly owner: LazyRunnerOwner) {
      super(driver, 'master');
      // The runner says its transaction is open from the start, as TypeORM
      // would see it had it begun eagerly: `save()` and query builders then
      // write without a transaction (a savepoint) of their own, and the
      // handler's own `manager.transaction()` becomes a savepoint. Its
      // first statement begins it (see `connect()`).
      this.isTransactionActive = true;
      this.transactionDepth = 1;
    }

    override connect(): Promise<PoolClient> {
      return this.owner.connectRunner(this as unknown as LazyQueryRunner);
    }

    // Refused once the module began to end the transaction (a statement
    // sent after its ROLLBACK or COMMIT would run outside of any), or
    // after (TypeORM would only say that the runner was released).
    override query(...args: unknown[]): Promise<unknown> {
      const refused = this.owner.refuses(args[0]);
      if (refused) {
        return Promise.reject(refused);
      }
      return super.query(...args);
    }

    connectToPool(): Promise<PoolClient> {
      return super.connect();
    }

    // The module gives the connection back once the transaction ended
    // (`releasePostgresConnection`): the handler's own `release()` would
    // hand it to the pool with the transaction still open on it, for the
    // next request to commit. It does nothing, as `release()` of the
    // other data libraries' clients, but take the runner off the driver's
    // list of connected runners: TypeORM's `destroy()` releases each of
    // them until the list is empty, and would loop for ever (the process
    // at full CPU, never closing) on a runner that stays there while its
    // handler still runs. The pool's end then waits for the connection.
    override release(): Promise<void> {
      const runners = (driver as { connectedQueryRunners?: unknown[] })
        .connectedQueryRunners;
      const index = runners?.indexOf(this) ?? -1;
      if (index !== -1) {
        runners!.splice(index, 1);
      }
      return Promise.resolve();
    }

    // A transaction the handler opens itself (`manager.transaction()`) is a
    // savepoint of this one.
    override async startTransaction(isolationLevel?: unknown): Promise<void> {
      await this.connect();
      return super.startTransaction(isolationLevel);
    }
  }

  class LazyManager extends Manager {
    // ...which cannot run at another isolation level: refused before it
    // begins (a failed begin would roll the whole transaction back).
    override async transaction(...args: unknown[]): Promise<unknown> {
      if (typeof args[0] === 'string') {
        await (this.queryRunner as LazyQueryRunner).owner.joinAt(args[0]);
      }
      return super.transaction(...args);
    }
  }

  return (owner) => {
    const runner = new LazyRunner(owner) as unknown as LazyQueryRunner;
    // As createQueryRunner() does (the manager also sets itself).
    return Object.assign(runner, {
      manager: new LazyManager(dataSource, runner) as unknown as EntityManager,
    });
  };
}
