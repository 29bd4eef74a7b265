import { readdirSync, readFileSync } from 'node:fs';
import type { LoadResult } from './load.js';

/** Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

/**
 * A `/proc/.../stat` file (`/proc/<pid>/stat`, `/proc/<pid>/task/<tid>/stat`):
 * the command name, and the fields after it; undefined if gone.
 */
function readStat(
  path: string,
): { name: string; fields: string[] } | undefined {
  let stat: string;
  try {
    stat = readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  const end = stat.lastIndexOf(')');
  return {
    name: stat.slice(stat.indexOf('(') + 1, end),
    fields: stat.slice(end + 2).split(' '),
  };
}

/** Fields of `/proc/<pid>/stat` after the command name, or undefined if gone. */
const statFields = (pid: number): string[] | undefined =>
  readStat(`/proc/${pid}/stat`)?.fields;

/** Index, in {@link statFields}, of utime (stime, cutime, cstime follow). */
const UTIME = 11;
const PPID = 1;

const ticks = (fields: string[], from: number, count: number) =>
  fields
    .slice(from, from + count)
    .reduce((sum, value) => sum + Number(value), 0);

/**
 * CPU time a process has used, in milliseconds (user + system), or
 * `undefined` where `/proc` does not tell (not Linux, another machine).
 */
export function processCpuMs(pid: number | undefined): number | undefined {
  const fields = pid === undefined ? undefined : statFields(pid);
  return fields && (ticks(fields, UTIME, 2) * 1000) / TICKS_PER_SECOND;
}

/**
 * CPU time of each thread of a process, in milliseconds (user + system),
 * summed by kind: `main` (the JavaScript thread), then the others by
 * name without a trailing number (`V8Worker`: V8's garbage collection and
 * compiler helpers; `libuv-worker`...). Empty where `/proc` does not tell.
 */
export function threadCpuMs(pid: number): Record<string, number> {
  const byKind: Record<string, number> = {};
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return byKind;
  }
  for (const tid of tasks) {
    const stat = readStat(`/proc/${pid}/task/${tid}/stat`);
    if (!stat) {
      continue; // the thread ended meanwhile
    }
    const { name, fields } = stat;
    const kind = tid === String(pid) ? 'main' : name.replace(/\d+$/, '');
    byKind[kind] =
      (byKind[kind] ?? 0) + (ticks(fields, UTIME, 2) * 1000) / TICKS_PER_SECOND;
  }
  return byKind;
}

/**
 * CPU time of a PostgreSQL server, in milliseconds: the postmaster, its live
 * children (backends, WAL writer, checkpointer, autovacuum...) and the
 * children it has reaped. `undefined` where `/proc` does not show it.
 */
export function serverCpuMs(
  postmaster: number | undefined,
): number | undefined {
  const own = postmaster === undefined ? undefined : statFields(postmaster);
  if (postmaster === undefined || !own) {
    return undefined;
  }
  let total = ticks(own, UTIME, 4);
  for (const { fields } of childrenOf(postmaster)) {
    total += ticks(fields, UTIME, 2);
  }
  return (total * 1000) / TICKS_PER_SECOND;
}

/** The live child processes of `parent`, with their {@link statFields}. */
function* childrenOf(
  parent: number,
): Generator<{ pid: number; fields: string[] }> {
  for (const entry of readdirSync('/proc')) {
    if (/^\d+$/.test(entry)) {
      const pid = Number(entry);
      const fields = statFields(pid);
      if (fields && Number(fields[PPID]) === parent) {
        yield { pid, fields };
      }
    }
  }
}

/**
 * CPU time, in milliseconds, of the live sessions of a PostgreSQL server
 * on one database: the children of `postmaster` whose process title
 * (`postgres: [<cluster_name>: ]<user> <database> <client> <state>`, PostgreSQL's
 * `update_process_title`, on by default on Linux) names `database`. It
 * leaves out what the server does for every database (WAL writer,
 * checkpointer, background writer) and its autovacuum workers, which may
 * vacuum another database's tables during this one's run: the work of
 * this database's statements alone. Sessions that ended are not counted
 * (an app's pool that keeps its connections open loses none).
 */
export function sessionsCpuMs(
  postmaster: number | undefined,
  database: string | undefined,
): number | undefined {
  if (postmaster === undefined || database === undefined) {
    return undefined;
  }
  let total = 0;
  for (const { pid, fields } of childrenOf(postmaster)) {
    if (sessionDatabase(pid) === database) {
      total += ticks(fields, UTIME, 2);
    }
  }
  return (total * 1000) / TICKS_PER_SECOND;
}

/** The database a server's child process is a session on, by its title. */
function sessionDatabase(pid: number): string | undefined {
  try {
    const title = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    // A title replaces the arguments: one string, without NUL separators,
    // after the server's `cluster_name` where it has one (`15/main: `).
    return /^postgres: (?:\S+: )?\S+ (\S+) /.exec(title)?.[1];
  } catch {
    return undefined;
  }
}

/**
 * The postmaster of the backend `backendPid`, if that backend runs on this
 * machine (its parent process is then a `postgres`).
 */
export function postmasterOf(backendPid: number): number | undefined {
  const fields = statFields(backendPid);
  if (!fields) {
    return undefined;
  }
  const parent = Number(fields[PPID]);
  try {
    const command = readFileSync(`/proc/${parent}/comm`, 'utf8').trim();
    return command === 'postgres' ? parent : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Microseconds of CPU a request (user + system, from `/proc`), of the
 * app's process, of the Redis server, and of the PostgreSQL server (its
 * postmaster and every child); each only where this machine runs it.
 */
export interface CpuPerRequest {
  readonly app?: number;
  readonly redis?: number;
  readonly db?: number;
  /**
   * Of the PostgreSQL server's sessions on the run's own database
   * ({@link sessionsCpuMs}): the statements' work without the server's
   * shared processes.
   */
  readonly sessions?: number;
}

/** A load run, and the CPU it cost. */
export interface Measured extends LoadResult {
  readonly cpu: CpuPerRequest;
}

/** Where the CPU time of a run is read: the processes on this machine. */
export interface CpuSources {
  readonly app?: number;
  readonly redis?: number;
  readonly postmaster?: number;
  /** The run's own database, whose sessions {@link sessionsCpuMs} reads. */
  readonly database?: string;
}

/** CPU milliseconds so far of each of `sources`. */
export function cpuNow(sources: CpuSources): CpuPerRequest {
  return {
    app: processCpuMs(sources.app),
    redis: processCpuMs(sources.redis),
    db: serverCpuMs(sources.postmaster),
    sessions: sessionsCpuMs(sources.postmaster, sources.database),
  };
}

/** The CPU between `before` and `after`, a request of `result`, in µs. */
export function withCpu(
  result: LoadResult,
  before: CpuPerRequest,
  after: CpuPerRequest,
): Measured {
  const perRequest = (of: keyof CpuPerRequest) => {
    const [a, b] = [before[of], after[of]];
    return a === undefined || b === undefined || result.requests === 0
      ? undefined
      : ((b - a) * 1000) / result.requests;
  };
  return {
    ...result,
    cpu: {
      app: perRequest('app'),
      redis: perRequest('redis'),
      db: perRequest('db'),
      sessions: perRequest('sessions'),
    },
  };
}
