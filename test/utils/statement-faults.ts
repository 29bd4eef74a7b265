import pg from 'pg';
import type { Pool } from 'pg';
import type { DataSource } from 'typeorm';
import { ArmedFaults, type ArmedFault, type Fault } from './armed-faults.js';
import { Barrier } from './barrier.js';
import { terminateBackend } from './sessions.js';

/** A statement as a connection of the application sends it. */
export interface Statement {
  readonly text: string;
  readonly values: readonly unknown[];
  /** `application_name` of the session that sends it. */
  readonly applicationName: string | undefined;
}

/**
 * When the session of a statement's connection ends (`pg_terminate_backend`):
 * - `before`: before the statement is sent. Once the application's driver
 *   has seen its session end, the statement goes, and fails.
 * - `after`: once the statement ran on the server, before its reply reaches
 *   the caller, who gets the session's error instead: the statement took
 *   effect (or, inside a transaction, rolled back with it), and the caller
 *   cannot know.
 * - `after-reply`: once the statement ran, with its reply kept until the
 *   driver has seen the session end; then the caller gets the reply. The
 *   connection is lost before whatever the caller does next.
 * - `in-reply`: as the statement is sent: the server has ended the session
 *   (it did not run), and the statement's reply is the server's error for
 *   it (57P01); the driver sees its socket close only once the connection
 *   is used again, or closed. A session ended at the moment a statement
 *   went, in the driver's worst order: the caller learns of the end from
 *   an error that leaves the client looking healthy.
 */
export type FaultTiming = 'before' | 'after' | 'after-reply' | 'in-reply';

/** Where to end a session: at the first statement `matches` takes. */
export type StatementFault = Fault<Statement, FaultTiming>;

/** Statements held before they are sent, until the test lets them go. */
export interface HeldStatements {
  /** Resolves once a statement is held. */
  reached(): Promise<void>;
  /** Lets every held and later statement go. */
  release(): void;
}

/** A pg client as the interceptor reads it. */
interface DriverClient {
  readonly processID?: number;
  readonly connectionParameters?: { readonly application_name?: string };
  /** Its protocol connection, whose events tell the client what came. */
  readonly connection: { emit(event: string, ...args: unknown[]): boolean };
  on(event: 'error', listener: (error: Error) => void): unknown;
  once(event: 'end', listener: () => void): unknown;
  end(...args: unknown[]): unknown;
}

type Query = (this: DriverClient, ...args: unknown[]) => unknown;

interface Hold {
  readonly matches: (statement: Statement) => boolean;
  readonly barrier: Barrier;
}

/** How long the driver may take to see its session end. */
const SEEN_TIMEOUT_MS = 10_000;

/**
 * Ends the PostgreSQL session of an application's connection at a chosen
 * statement, as a network or a server would, without touching the module:
 * `query` of the pg driver's `Client` (the class every data library's pool
 * and the module's presence session are made of) is wrapped; statements of
 * other connections (the test's own) pass untouched. A statement is found
 * by its text and parameters, a session ended from a connection of the
 * injector's own.
 */
export class StatementFaults {
  private readonly armed = new ArmedFaults<Statement, FaultTiming>();
  private readonly holds: Hold[] = [];
  /**
   * Connections whose session ended unseen (`in-reply`): what tells their
   * driver the rest, once they are used again or closed.
   */
  private readonly unseen = new Map<DriverClient, () => void>();
  private restored = false;

  private constructor(
    private readonly client: pg.Client,
    private readonly pool: Pool,
    private readonly prototype: { query: Query },
    private readonly query: Query,
  ) {}

  /**
   * Starts watching the statements of `pool`'s connections (the pool a
   * data library writes through), and of sessions named
   * `applicationNames`, on its database at `url`.
   */
  static async install(
    pool: Pool,
    url: string,
    applicationNames: readonly string[] = [],
  ): Promise<StatementFaults> {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    await client.connect();
    // Every data library's pool is node-postgres's, of this one package.
    const prototype = pg.Client.prototype as unknown as { query: Query };
    const faults = new StatementFaults(
      client,
      pool,
      prototype,
      prototype.query,
    );
    const names = new Set(applicationNames);
    const watched = (connection: DriverClient) =>
      (faults.pool as unknown as { _clients: unknown[] })._clients.includes(
        connection,
      ) || names.has(connection.connectionParameters?.application_name ?? '');
    const query = faults.query;
    prototype.query = function (this: DriverClient, ...args: unknown[]) {
      const result = watched(this)
        ? faults.intercept(this, args)
        : query.apply(this, args);
      // Sent on a session that ended unseen: the statement went, and the
      // driver now sees the socket close.
      faults.unseen.get(this)?.();
      return result;
    };
    return faults;
  }

  /**
   * Ends the session of the next statement `fault` matches, at its timing;
   * its `injected` resolves once the driver saw its session end.
   */
  arm(fault: StatementFault): ArmedFault<Statement> {
    return this.armed.arm(fault);
  }

  /** Holds every statement `matches` takes before it is sent, until released. */
  hold(matches: (statement: Statement) => boolean): HeldStatements {
    const hold: Hold = { matches, barrier: new Barrier() };
    this.holds.push(hold);
    return {
      reached: () => hold.barrier.reached(),
      release: () => {
        this.holds.splice(this.holds.indexOf(hold), 1);
        hold.barrier.open();
      },
    };
  }

  /** Puts the driver's `query` back and closes the injector's connection. */
  async restore(): Promise<void> {
    if (this.restored) {
      return;
    }
    this.restored = true;
    this.prototype.query = this.query;
    for (const seen of [...this.unseen.values()]) {
      seen();
    }
    for (const hold of this.holds.splice(0)) {
      hold.barrier.open();
    }
    await this.client.end();
  }

  private intercept(connection: DriverClient, args: unknown[]): unknown {
    const [config, second] = args;
    const text =
      typeof config === 'string'
        ? config
        : (config as { text?: unknown } | undefined)?.text;
    const submittable =
      typeof (config as { submit?: unknown } | undefined)?.submit ===
      'function';
    if (typeof text !== 'string' || submittable) {
      return this.query.apply(connection, args);
    }
    const statement: Statement = {
      text,
      values: Array.isArray(second)
        ? (second as unknown[])
        : ((config as { values?: unknown[] } | undefined)?.values ?? []),
      applicationName: connection.connectionParameters?.application_name,
    };
    const hold = this.holds.find((candidate) => candidate.matches(statement));
    const fault = this.armed.take(statement);
    if (!hold && !fault) {
      return this.query.apply(connection, args);
    }
    // pg-pool passes a callback; TypeORM and the module await a promise.
    const callback = args.find((arg) => typeof arg === 'function') as
      ((error: unknown, result?: unknown) => void) | undefined;
    const queryArgs = args.filter((arg) => arg !== callback);
    const send = () =>
      this.query.apply(connection, queryArgs) as Promise<unknown>;
    const run = async (): Promise<unknown> => {
      await hold?.barrier.wait();
      if (!fault) {
        return send();
      }
      if (fault.timing === 'before') {
        await this.end(connection);
        fault.injected();
        return send();
      }
      if (fault.timing === 'in-reply') {
        const answer = await this.endUnseen(connection);
        const outcome = send();
        try {
          answer();
          fault.injected();
        } catch (error) {
          fault.failed(error);
        }
        return outcome;
      }
      const result = await send();
      const error = await this.end(connection);
      fault.injected();
      if (fault.timing === 'after') {
        throw error;
      }
      return result;
    };
    const outcome = run();
    if (!callback) {
      return outcome;
    }
    outcome.then(
      (result) => callback(undefined, result),
      (error: unknown) => callback(error),
    );
    return undefined;
  }

  /**
   * Ends the session of `connection` while its driver is kept from seeing
   * it: what the server sent, its error and its socket's close, is held
   * back. Returns what delivers the server's error as the reply of the
   * statement sent meanwhile; the rest is delivered once the connection
   * is used again or closed (`end()`, as the pool closes a client).
   */
  private async endUnseen(connection: DriverClient): Promise<() => void> {
    const driver = connection.connection;
    const emit = driver.emit;
    const held: Array<readonly [string, unknown[]]> = [];
    let closed = () => {};
    driver.emit = (event: string, ...args: unknown[]) => {
      held.push([event, args]);
      if (event === 'end') {
        closed();
      }
      return true;
    };
    const end = connection.end;
    const deliver = () => {
      this.unseen.delete(connection);
      driver.emit = emit;
      delete (connection as { end?: unknown }).end;
      for (const [event, args] of held.splice(0)) {
        emit.call(driver, event, ...args);
      }
    };
    this.unseen.set(connection, deliver);
    // Closed by its owner (the pool), the client ends as the session has.
    connection.end = function (this: DriverClient, ...args: unknown[]) {
      const ending = end.apply(this, args);
      deliver();
      return ending;
    };
    await this.terminate(connection);
    // The socket's close reached the client (held back from its driver).
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error('The session never closed')),
        SEEN_TIMEOUT_MS,
      );
      closed = () => {
        clearTimeout(timer);
        resolve();
      };
      if (held.some(([event]) => event === 'end')) {
        closed();
      }
    });
    return () => {
      const at = held.findIndex(([event]) => event === 'errorMessage');
      if (at < 0) {
        deliver();
        throw new Error('The server ended the session without an error');
      }
      const [[event, args]] = held.splice(at, 1);
      emit.call(driver, event, ...args);
    };
  }

  /** Ends the server session of `connection` (`pg_terminate_backend`). */
  private async terminate(connection: DriverClient): Promise<void> {
    if (connection.processID === undefined) {
      throw new Error('The connection has no backend to end');
    }
    await terminateBackend(
      {
        query: async <T>(sql: string, params?: unknown[]) =>
          (await this.client.query(sql, params)).rows as T[],
      },
      connection.processID,
    );
  }

  /**
   * Ends the session of `connection` and waits until its driver has seen
   * it (the client ended); returns the error the client got.
   */
  private async end(connection: DriverClient): Promise<Error> {
    let error = new Error('Connection terminated unexpectedly');
    let first = true;
    connection.on('error', (received) => {
      if (first) {
        first = false;
        error = received;
      }
    });
    const seen = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error('The driver never saw its session end')),
        SEEN_TIMEOUT_MS,
      );
      connection.once('end', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    await this.terminate(connection);
    await seen;
    return error;
  }
}

/** The pg pool of a TypeORM `DataSource` on PostgreSQL. */
export function typeormPool(dataSource: DataSource): Pool {
  const { master } = dataSource.driver as unknown as { master?: Pool };
  if (!master) {
    throw new Error('The DataSource has no pg pool: is it PostgreSQL?');
  }
  return master;
}
