import { startSample, type SampleProcess } from '../utils/sample-process.js';
import { LEAN_TABLE } from './bench-app/lean-keys.js';
import { onServer } from './database.js';

const MODES_MAIN = new URL('bench-app/modes-main.js', import.meta.url);

/** The URL of the database `name` on the server at `serverUrl`. */
export function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.href;
}

/**
 * Starts the modes bench's app of `mode` (bench-app/modes-main.ts) with
 * `env`, and Node.js's flags `execArgv`; resolves once it listens.
 */
export function startModeApp(
  mode: string,
  env: Record<string, string>,
  execArgv: readonly string[] = [],
): Promise<SampleProcess> {
  return startSample(
    { ...env, BENCH_MODE: mode },
    {
      entry: MODES_MAIN.href,
      ready: /Bench app listening on (http:\/\/\S+)/,
      execArgv,
    },
  );
}

/** The name of the database of `mode`: a copy of `base` once migrated. */
export const modeDatabaseName = (base: string, mode: string): string =>
  `${base}_${mode}`;

/**
 * The databases of `modes` on the server at `serverUrl`: `base`, which the
 * baseline's app migrates (TypeORM runs the migrations at start-up), then a
 * copy of it for each mode, `<base>_<mode>`, the lean floor's with its
 * table of its own. Each name goes onto `made` as soon as it exists, for
 * the caller to drop.
 * @returns each mode's database URL.
 */
export async function makeModeDatabases(
  serverUrl: string,
  base: string,
  modes: readonly string[],
  env: Record<string, string>,
  made: string[],
): Promise<Map<string, string>> {
  await onServer(serverUrl, `CREATE DATABASE "${base}"`);
  made.push(base);
  await (
    await startModeApp('baseline', {
      ...env,
      DATABASE_URL: databaseUrl(serverUrl, base),
    })
  ).stop();
  const urls = new Map<string, string>();
  for (const mode of modes) {
    const name = modeDatabaseName(base, mode);
    await onServer(serverUrl, `CREATE DATABASE "${name}" TEMPLATE "${base}"`);
    made.push(name);
    urls.set(mode, databaseUrl(serverUrl, name));
    if (mode === 'lean') {
      // As its application would have it from a migration of its own.
      await onServer(urls.get(mode)!, LEAN_TABLE);
    }
  }
  return urls;
}
