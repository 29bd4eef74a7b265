import type { LazyPoolClient } from '../pg/pool-transaction.js';
import { throughPrisma } from './prisma-errors.js';

/**
 * Where the Prisma transaction is:
 * - `starting`: Prisma begins it (`BEGIN`, `SET TRANSACTION ...`);
 * - `running`: the handler writes through it;
 * - `returned`: the handler returned (or the module ended the
 *   transaction): Prisma may end it, on the module's word or on its own
 *   timeout.
 */
type Phase = 'starting' | 'running' | 'returned';

/** What a statement of Prisma's own is answered with: no rows. */
const NOTHING = Object.freeze({
  command: '',
  rowCount: 0,
  rows: [],
  fields: [],
});

/** Prisma's own end of a transaction, as its transaction manager sends it. */
const END = /^(COMMIT|ROLLBACK)$/;

/**
 * @internal What Prisma's interactive transaction of a decorated handler
 * runs on, in place of a pg `PoolClient` (see `routePool`): the handler's
 * statements go through the module's lazy client (the first one takes a
 * connection and begins the transaction); Prisma's own begin, and its own
 * end once the handler returned, are answered here, without a connection:
 * the module begins, commits and rolls back the transaction itself, with
 * its record in it.
 *
 * It has what `@prisma/adapter-pg`'s transaction uses of a `PoolClient`:
 * `query()`, `on()` and `removeListener()` for `'error'` (the module
 * watches the real connection), and `release()` (the module gives the
 * connection back when the transaction ends). Prisma's transaction manager
 * sends `COMMIT` and `ROLLBACK` through `query()`, as `@prisma/adapter-pg`
 * asks it to (no phantom queries).
 */
export class DriverConnection {
  private phase: Phase = 'starting';

  constructor(private readonly client: LazyPoolClient) {}

  /** Prisma handed the transaction over: its statements are the handler's. */
  running(): void {
    if (this.phase === 'starting') {
      this.phase = 'running';
    }
  }

  /**
   * The handler returned: from now on, a `COMMIT` or `ROLLBACK` is Prisma
   * ending its transaction (on the module's word, or on its own timeout
   * while the module completes), not the handler's.
   */
  returned(): void {
    this.phase = 'returned';
  }

  query(...args: unknown[]): Promise<unknown> {
    if (
      this.phase === 'starting' ||
      (this.phase === 'returned' && END.test(textOf(args[0])))
    ) {
      return Promise.resolve(NOTHING);
    }
    return this.client.query(...args).catch(throughPrisma);
  }

  on(): this {
    return this;
  }

  removeListener(): this {
    return this;
  }

  release(): void {
    // The module gives the connection back when the transaction ends.
  }
}

/** The SQL of a statement, as pg's `query()` takes it. */
function textOf(query: unknown): string {
  const text =
    typeof query === 'string' ? query : (query as { text?: unknown })?.text;
  return typeof text === 'string' ? text.trim().toUpperCase() : '';
}
