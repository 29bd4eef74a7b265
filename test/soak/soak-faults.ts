import type pg from 'pg';
import { PRESENCE_APPLICATION_NAME } from '../utils/sessions.js';
import type { SeededRandom } from './seeded-random.js';
import {
  LAST_STATEMENT,
  SOAK_LIBRARIES,
  type SoakLibrary,
} from './soak-libraries.js';
import { unreadBytes } from './socket-queue.js';
import { delay } from './soak-client.js';
import {
  instanceAppName,
  instanceOfAppName,
  type SoakInstances,
} from './soak-instances.js';

/**
 * One fault the soak injects. Each but the database restart hits the
 * instances of one data library (`library`).
 */
export type Fault =
  /**
   * SIGKILL of an instance, which then starts again; the faults that
   * follow go on meanwhile, but those that hit it, which wait for it.
   */
  | {
      readonly kind: 'kill';
      readonly library: SoakLibrary;
      readonly instance: number;
    }
  /**
   * SIGSTOP of an instance for `pauseMs` (past its lease), then SIGCONT;
   * the faults that follow go on meanwhile, but those that hit the paused
   * instance, which wait for it.
   */
  | {
      readonly kind: 'pause';
      readonly library: SoakLibrary;
      readonly instance: number;
      readonly pauseMs: number;
    }
  /**
   * An instance stopped (SIGSTOP) once a handler of it has run its last
   * statement and before it reads the result; the server ends its sessions
   * idle in a transaction; it goes on (SIGCONT) after `frozenMs` and finds
   * the transaction lost between the handler's last write and its
   * completion (see `freezeAndTerminate`).
   */
  | {
      readonly kind: 'freeze-terminate';
      readonly library: SoakLibrary;
      readonly frozenMs: number;
    }
  /**
   * `pg_terminate_backend` of `count` sessions of the library's instances
   * or presence sessions (of any instance), whatever they do.
   */
  | {
      readonly kind: 'terminate';
      readonly library: SoakLibrary;
      readonly count: number;
    }
  /**
   * `pg_terminate_backend` of up to `count` sessions of the library's
   * instances idle in a handler's transaction: the sample's handlers open
   * theirs after their charge step committed, so each such request fails
   * (503) with its key bound to it.
   */
  | {
      readonly kind: 'terminate-in-transaction';
      readonly library: SoakLibrary;
      readonly count: number;
    }
  /** The database server goes down (`pg_ctl stop -m <mode>`) for `downMs`. */
  | {
      readonly kind: 'db-restart';
      readonly mode: 'fast' | 'immediate';
      readonly downMs: number;
    };

/** A fault, after a gap of `gapMs` since the previous one ended. */
export interface PlannedFault {
  readonly gapMs: number;
  readonly fault: Fault;
}

/** What a fault did, for the summary and the failure message. */
export interface FaultRecord {
  /** When it started, in ms since the run started. */
  readonly at: number;
  readonly tookMs: number;
  readonly fault: Fault;
  /** For a fault that goes on in the background: filled in once it is over. */
  detail: string;
  /** Whether it is the second try of a fault that found nothing to hit. */
  readonly again?: boolean;
}

/**
 * How many of each fault a run injects at least (as many as the fleet has
 * data libraries, so that each fault hits each), and one database restart.
 */
export const FAULT_COUNTS = {
  kill: 2,
  pause: 2,
  'freeze-terminate': 5,
  terminate: 4,
  'terminate-in-transaction': 3,
} as const;

/**
 * The run's faults on a fleet whose instance `i` writes with `libraries[i]`,
 * in a seeded order with seeded gaps: of each kind, {@link FAULT_COUNTS}
 * or one per library, whichever is more, the libraries hit in a seeded
 * order, each at least once; those that look for a handler in its
 * transaction before the last quarter. Pauses outlast the lease (`leaseMs`): another
 * instance takes the paused one's keys over, and its late completions must
 * be fenced off.
 */
export function planFaults(
  random: SeededRandom,
  libraries: readonly SoakLibrary[],
  leaseMs: number,
): PlannedFault[] {
  const faults: Fault[] = [];
  const fleet = SOAK_LIBRARIES.filter((library) => libraries.includes(library));
  const instanceOf = (library: SoakLibrary) =>
    random.pick(
      [...libraries.keys()].filter((index) => libraries[index] === library),
    );
  const times = (
    kind: keyof typeof FAULT_COUNTS,
    make: (library: SoakLibrary) => Fault,
  ) => {
    const order = random.shuffle(fleet);
    const count = Math.max(FAULT_COUNTS[kind], fleet.length);
    for (let i = 0; i < count; i += 1) {
      faults.push(make(order[i % order.length]));
    }
  };
  times('kill', (library) => ({
    kind: 'kill',
    library,
    instance: instanceOf(library),
  }));
  times('pause', (library) => ({
    kind: 'pause',
    library,
    instance: instanceOf(library),
    pauseMs: leaseMs + random.int(500, 1_500),
  }));
  times('freeze-terminate', (library) => ({
    kind: 'freeze-terminate',
    library,
    frozenMs: random.int(50, 400),
  }));
  times('terminate', (library) => ({
    kind: 'terminate',
    library,
    count: random.int(1, 4),
  }));
  times('terminate-in-transaction', (library) => ({
    kind: 'terminate-in-transaction',
    library,
    count: random.int(1, 2),
  }));
  const order = random.shuffle(faults);
  // The faults that look for a handler in its transaction come before the
  // last quarter of the run, when the clients' load thins out.
  const seeks = (fault: Fault) =>
    fault.kind === 'freeze-terminate' ||
    fault.kind === 'terminate-in-transaction';
  const late = order.splice(Math.floor((order.length * 3) / 4));
  for (const fault of late.filter(seeks)) {
    order.splice(random.int(0, order.length), 0, fault);
  }
  order.push(...late.filter((fault) => !seeks(fault)));
  // The database restart comes mid-run, with traffic before and after it.
  order.splice(random.int(3, order.length - 3), 0, {
    kind: 'db-restart',
    mode: random.pick(['fast', 'immediate'] as const),
    downMs: random.int(300, 1_500),
  });
  return order.map((fault) => ({ gapMs: random.int(50, 400), fault }));
}

/** A fault as one line. */
export function describeFault(fault: Fault): string {
  switch (fault.kind) {
    case 'kill':
      return `kill #${fault.instance} ${fault.library}`;
    case 'pause':
      return `pause #${fault.instance} ${fault.library} ${fault.pauseMs}ms`;
    case 'freeze-terminate':
      return `freeze-terminate ${fault.library} ${fault.frozenMs}ms`;
    case 'terminate':
      return `terminate ${fault.library} ×${fault.count}`;
    case 'terminate-in-transaction':
      return `terminate-in-transaction ${fault.library} ×${fault.count}`;
    case 'db-restart':
      return `db-restart ${fault.mode} ${fault.downMs}ms`;
  }
}

/** What the faults act on. */
export interface FaultTarget {
  readonly instances: SoakInstances;
  /** A pool on the app's database (application_name other than the app's). */
  readonly db: pg.Pool;
  /** The database server, which the test started and may restart. */
  readonly server: {
    readonly port: number;
    shutdown(mode: 'fast' | 'immediate'): Promise<void>;
    restart(): Promise<void>;
  };
  /** Picks the victims among sessions found at run time. */
  readonly random: SeededRandom;
  /** Epoch ms the run started. */
  readonly startedAt: number;
}

/**
 * Sessions of the app: the pools' of the instances whose application names
 * are `$1`, and the presence sessions (of every instance).
 */
const APP_SESSIONS = `datname = current_database() AND backend_type = 'client backend'
  AND (application_name = ANY($1::text[]) OR application_name = '${PRESENCE_APPLICATION_NAME}')`;

/** The application names of the pools of `library`'s instances. */
function appNames(instances: SoakInstances, library: SoakLibrary): string[] {
  return instances.of(library).map(instanceAppName);
}

/** The instances `fault` acts on (none: the database server). */
function victims(fault: Fault, instances: SoakInstances): number[] {
  switch (fault.kind) {
    case 'kill':
    case 'pause':
      return [fault.instance];
    case 'db-restart':
      return [];
    default:
      return instances.of(fault.library);
  }
}

/**
 * What the test's own connections see of a server that a fault restarted: a
 * connection that died with it, or a server not ready yet.
 */
const SERVER_GONE =
  /Connection terminated|terminating connection|ECONNRESET|ECONNREFUSED|the database system is (starting up|shutting down|in recovery mode)/;

/**
 * Runs a statement of the test on `db`, again (a few times) when the
 * server was restarted under it.
 */
async function rows<T extends pg.QueryResultRow>(
  db: pg.Pool,
  sql: string,
  params?: unknown[],
): Promise<T[]> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return (await db.query<T>(sql, params)).rows;
    } catch (error) {
      if (attempt >= 5 || !SERVER_GONE.test((error as Error).message)) {
        throw error;
      }
      await delay(100);
    }
  }
}

/**
 * Injects `plan`, one fault after the other, and says what each did; a
 * fault that found no handler to hit (`no …`) is tried once more after
 * the next one. A
 * pause, and a killed instance's new start, go on while the next faults
 * run, but a fault that acts on that instance waits for their end; all
 * have ended when this resolves.
 */
export async function injectFaults(
  plan: readonly PlannedFault[],
  target: FaultTarget,
): Promise<FaultRecord[]> {
  const records: FaultRecord[] = [];
  // What goes on in the background, by instance: a pause, a new start.
  const pending = new Map<number, Promise<void>>();
  const failed = (fault: Fault, started: number) => (error: unknown) => {
    throw new Error(
      `${describeFault(fault)} at ${started - target.startedAt}ms failed: ${(error as Error).message}`,
      { cause: error },
    );
  };
  try {
    const queue = [...plan];
    const again = new Set<Fault>();
    for (let next = queue.shift(); next; next = queue.shift()) {
      const { gapMs, fault } = next;
      await delay(gapMs);
      await Promise.all(
        victims(fault, target.instances).flatMap(
          (index) => pending.get(index) ?? [],
        ),
      );
      const started = Date.now();
      const done = await inject(fault, target).catch(failed(fault, started));
      const record: FaultRecord = {
        at: started - target.startedAt,
        tookMs: Date.now() - started,
        fault,
        detail: typeof done === 'string' ? done : done.now,
        ...(again.has(fault) && { again: true }),
      };
      records.push(record);
      // Found no handler to hit (`no …`): once more, after the next fault.
      if (
        typeof done === 'string' &&
        done.startsWith('no ') &&
        !again.has(fault)
      ) {
        again.add(fault);
        queue.splice(1, 0, next);
      }
      if (typeof done !== 'string') {
        pending.set(
          done.instance,
          done.later.then(
            (detail) => {
              record.detail = detail;
            },
            failed(fault, started),
          ),
        );
      }
    }
  } finally {
    await Promise.all(pending.values());
  }
  return records;
}

/** A fault that goes on in the background after `now`, on `instance`. */
interface Ongoing {
  readonly instance: number;
  /** What it did so far. */
  readonly now: string;
  /** What it did, once over. */
  readonly later: Promise<string>;
}

async function inject(
  fault: Fault,
  target: FaultTarget,
): Promise<string | Ongoing> {
  const { instances, db, server, random } = target;
  switch (fault.kind) {
    case 'kill': {
      const started = Date.now();
      return {
        instance: fault.instance,
        now: 'killed',
        later: instances
          .kill(fault.instance)
          .then(() => `killed and started again in ${Date.now() - started}ms`),
      };
    }
    case 'pause': {
      const { instance, pauseMs } = fault;
      instances.pause(instance);
      return {
        instance,
        now: 'stopped',
        later: delay(pauseMs).then(() => {
          instances.resume(instance);
          return `stopped and resumed ${pauseMs}ms later`;
        }),
      };
    }
    case 'freeze-terminate':
      return freezeAndTerminate(target, fault.library, fault.frozenMs);
    case 'terminate': {
      const sessions = await rows<{ pid: number; presence: boolean }>(
        db,
        `SELECT pid, application_name = '${PRESENCE_APPLICATION_NAME}' AS presence
         FROM pg_stat_activity WHERE ${APP_SESSIONS} ORDER BY pid`,
        [appNames(instances, fault.library)],
      );
      const chosen = random.shuffle(sessions).slice(0, fault.count);
      const ended = await terminate(
        db,
        chosen.map((row) => row.pid),
      );
      const presence = chosen.filter((row) => row.presence).length;
      return `${ended} of ${sessions.length} sessions ended (${presence} presence)`;
    }
    case 'terminate-in-transaction':
      return terminateInTransaction(target, fault.library, fault.count);
    case 'db-restart': {
      await server.shutdown(fault.mode);
      await delay(fault.downMs);
      await server.restart();
      return 'down and up again';
    }
  }
}

/**
 * Whether a session's statement is the handler's last in its transaction
 * (it reads the payment back; the completion comes next), with the data
 * library whose `LAST_STATEMENT` is `$2`.
 */
const LAST_READ = `query LIKE $2`;

/** A session of the app as a freeze-terminate looks at it. */
interface AppSession {
  readonly pid: number;
  readonly app: string;
  /** The app's end of the connection. */
  readonly port: number;
  /** Whether its last statement is the handler's last ({@link LAST_READ}). */
  readonly last: boolean;
}

/**
 * Waits (a few seconds at most) for a handler of an instance of `library`
 * at its last statement ({@link LAST_READ}: running, or done), or else for
 * any of its sessions idle in a transaction; stops its instance (SIGSTOP)
 * and lets the server
 * finish what the instance had sent. When the instance has not read the
 * last statement's result yet (its socket's receive queue says so; any
 * session will do after 3 s), the fault ends the instance's sessions idle
 * in a transaction, as `idle_in_transaction_session_timeout` would, and
 * resumes it after `frozenMs`: the instance reads the last result and the
 * end of its connection at once, its transaction lost after the handler's
 * last statement, before its completion. Otherwise it resumes the instance
 * and looks again.
 */
async function freezeAndTerminate(
  { instances, db, server }: FaultTarget,
  library: SoakLibrary,
  frozenMs: number,
): Promise<string> {
  const started = Date.now();
  const last = LAST_STATEMENT[library];
  let stops = 0;
  while (Date.now() < started + 4_000) {
    const anyWillDo = Date.now() > started + 3_000;
    const sessions = await rows<AppSession>(
      db,
      `SELECT pid, application_name AS app, client_port AS port, ${LAST_READ} AS last
       FROM pg_stat_activity
       WHERE datname = current_database() AND application_name = ANY($1::text[])
         AND (state = 'idle in transaction' OR (state = 'active' AND ${LAST_READ}))`,
      [appNames(instances, library), last],
    );
    const found = sessions.find((row) => row.last) ?? sessions[0];
    const index = found && instanceOfAppName(found.app);
    if (index === undefined || (!found.last && !anyWillDo)) {
      continue;
    }
    instances.pause(index);
    stops += 1;
    try {
      const idle = await settledSessions(db, instanceAppName(index), last);
      let unread = 0;
      for (const session of idle.filter((row) => row.last)) {
        // Unknown (not Linux): taken as unread.
        if (((await unreadBytes(session.port, server.port)) ?? 1) > 0) {
          unread += 1;
        }
      }
      if (unread === 0 && !anyWillDo) {
        continue;
      }
      const ended = await terminate(
        db,
        idle.map((row) => row.pid),
      );
      await delay(frozenMs);
      return `${instances.label(index)} frozen (${stops}× stopped), ${ended} sessions idle in a transaction ended, ${unread} with the last read's result unread`;
    } finally {
      instances.resume(index);
    }
  }
  return `no transaction open (${stops}× stopped)`;
}

/**
 * Waits (2 s at most) for sessions of `library`'s instances idle in a
 * transaction (a handler's, between its statements), and ends up to
 * `count` of them.
 */
async function terminateInTransaction(
  { instances, db, random }: FaultTarget,
  library: SoakLibrary,
  count: number,
): Promise<string> {
  const started = Date.now();
  while (Date.now() < started + 2_000) {
    const sessions = await rows<{ pid: number }>(
      db,
      `SELECT pid FROM pg_stat_activity
       WHERE datname = current_database() AND application_name = ANY($1::text[])
         AND state = 'idle in transaction'
       ORDER BY pid`,
      [appNames(instances, library)],
    );
    if (sessions.length > 0) {
      const victims = random
        .shuffle(sessions.map((row) => row.pid))
        .slice(0, count);
      const ended = await terminate(db, victims);
      return `${ended} of ${sessions.length} sessions idle in a transaction ended after ${Date.now() - started}ms`;
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return 'no session idle in a transaction';
}

/**
 * The sessions of `app` idle in a transaction, once the statements its
 * (stopped) instance sent have run to their end; `last`: the `LIKE`
 * pattern of its library's last statement.
 */
async function settledSessions(
  db: pg.Pool,
  app: string,
  last: string,
): Promise<AppSession[]> {
  const settled = Date.now() + 500;
  while (
    Date.now() < settled &&
    (
      await rows(
        db,
        `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = $1
           AND state = 'active'`,
        [app],
      )
    ).length > 0
  ) {
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return rows<AppSession>(
    db,
    `SELECT pid, application_name AS app, client_port AS port, ${LAST_READ} AS last
     FROM pg_stat_activity
     WHERE datname = current_database() AND application_name = $1
       AND state = 'idle in transaction'`,
    [app, last],
  );
}

/**
 * Ends the sessions `pids` of the database (checked in the same statement:
 * a pid may have been reused by then) and waits until they are gone.
 * @returns how many were ended.
 */
async function terminate(db: pg.Pool, pids: number[]): Promise<number> {
  if (pids.length === 0) {
    return 0;
  }
  const ended = (
    await rows<{ pid: number; ended: boolean }>(
      db,
      `SELECT pid, pg_terminate_backend(pid) AS ended FROM pg_stat_activity
       WHERE pid = ANY($1::int[]) AND datname = current_database()`,
      [pids],
    )
  )
    .filter((row) => row.ended)
    .map((row) => row.pid);
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const alive = await rows(
      db,
      'SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])',
      [ended],
    );
    if (alive.length === 0) {
      break;
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return ended.length;
}
