/**
 * A gate that handlers wait at until the test opens it, and that tells the
 * test how many are waiting: races are forced by events, never by sleeps.
 */
export class Barrier {
  private opened = false;
  private readonly waiters: Array<() => void> = [];
  private readonly arrivals: Array<{ count: number; resolve: () => void }> = [];
  private arrived = 0;

  /** Called by the code under test: waits until the barrier opens. */
  wait(): Promise<void> {
    this.arrived += 1;
    for (const arrival of this.arrivals.filter(
      (a) => this.arrived >= a.count,
    )) {
      arrival.resolve();
    }
    if (this.opened) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /**
   * Waits until the barrier opens, as {@link wait} does, without counting
   * as an arrival: for a caller the test does not wait for (a call sent
   * again while its first is held).
   */
  whenOpen(): Promise<void> {
    if (this.opened) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Resolves once `count` callers have reached the barrier. */
  reached(count = 1): Promise<void> {
    if (this.arrived >= count) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.arrivals.push({ count, resolve }));
  }

  /** Lets every waiting and future caller through. */
  open(): void {
    this.opened = true;
    this.waiters.splice(0).forEach((resolve) => resolve());
  }
}

/** A promise, and what settles it. */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

/** A promise that the test settles. */
export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((ok, fail) => {
    resolve = ok;
    reject = fail;
  });
  return { promise, resolve, reject };
}

/** Lets the event loop run a few turns, I/O included. */
export async function turns(count = 5): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/**
 * Polls `condition` until it holds: for states that only the database can
 * report (a lock taken, a session gone). Fails after `timeoutMs`.
 */
export async function until(
  condition: () => Promise<boolean>,
  description: string,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) {
      throw new Error(`Timed out waiting for ${description}`);
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** The database helper `untilAdvisoryLocks` reads `pg_locks` through. */
interface LockReader {
  query<T>(sql: string): Promise<T[]>;
}

/**
 * How many advisory locks the database shows that are `waiting` (requested,
 * not granted) or `held` (granted). Locks taken in other databases of the
 * server (other test files) do not count.
 */
export async function advisoryLocks(
  db: LockReader,
  state: 'waiting' | 'held',
): Promise<number> {
  const [{ locks }] = await db.query<{ locks: number }>(
    `SELECT count(*)::int AS locks FROM pg_locks
     WHERE locktype = 'advisory' AND granted = ${state === 'held'}
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return locks;
}

/** Waits until the database shows exactly `count` advisory locks `state` (see {@link advisoryLocks}). */
export function untilAdvisoryLocks(
  db: LockReader,
  state: 'waiting' | 'held',
  count: number,
): Promise<void> {
  return until(
    async () => (await advisoryLocks(db, state)) === count,
    `${count} advisory lock(s) ${state}`,
  );
}

/**
 * Waits until exactly `count` sessions of the database wait for a lock that
 * another transaction holds (a row, a table, a transaction id): a statement
 * is then known to be blocked at that point.
 */
export function untilBlocked(db: LockReader, count: number): Promise<void> {
  return until(async () => {
    const [{ blocked }] = await db.query<{ blocked: number }>(
      `SELECT count(*)::int AS blocked FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    return blocked === count;
  }, `${count} session(s) waiting for a lock`);
}

/**
 * Waits until a duplicate in wait mode has marked the claim of `key` as
 * waited for (its owner then wakes the waiters when it completes).
 */
export function untilWaiting(db: LockReader, key: string): Promise<void> {
  return until(async () => {
    const rows = await db.query<{ waiting: boolean }>(
      `SELECT waiting FROM idempotency_records WHERE key = '${key.replace(/'/g, "''")}'`,
    );
    return rows[0]?.waiting === true;
  }, `a duplicate waiting for key ${key}`);
}
