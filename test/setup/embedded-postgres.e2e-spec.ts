import { spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  chmod,
  chown,
  mkdir,
  mkdtemp,
  readdir,
  rm,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  checkEmbeddedPostgresAccess,
  EXECUTE,
  firstBlockedPath,
  READ,
} from './embedded-postgres-start.js';

/** The checks are about running as root; elsewhere they skip, saying so. */
function describeAsRoot(): typeof describe {
  if (process.getuid?.() === 0) {
    return describe;
  }
  console.warn(
    'Skipping the tests of embedded PostgreSQL started as root: this process is not root',
  );
  return describe.skip;
}

/**
 * An unprivileged user that owns nothing but what a test gives it, as
 * embedded-postgres runs `postgres`: a uid and a gid, no other groups.
 */
const USER = { uid: 61_234, gid: 61_234 };

/** A fresh directory every user may enter; removed by `cleanUp()`. */
async function workspace(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-access-'));
  await chmod(dir, 0o755);
  return dir;
}

/** Creates the directory `path` (and missing parents) with `mode`. */
async function directory(path: string, mode: number): Promise<string> {
  await mkdir(path, { recursive: true });
  await chmod(path, mode);
  return path;
}

/** Whether the kernel grants `access` on `path` to `USER`, per test(1) run as that user. */
async function kernelGrants(path: string, access: number): Promise<boolean> {
  const tests = [
    ...(access & READ ? ['test -r "$1"'] : []),
    ...(access & EXECUTE ? ['test -x "$1"'] : []),
  ];
  const child = spawn('/bin/sh', ['-c', tests.join(' && '), 'sh', path], {
    ...USER,
    stdio: 'ignore',
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return code === 0;
}

describeAsRoot()('the check that the postgres user can reach a path', () => {
  let root: string;

  beforeEach(async () => {
    root = await workspace();
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  /** firstBlockedPath's verdict, after checking that the kernel agrees. */
  const blockedPath = async (path: string, access: number) => {
    const blocked = await firstBlockedPath(path, access, USER);
    expect(await kernelGrants(path, access)).toBe(blocked === undefined);
    return blocked;
  };

  it('passes a program below directories that others may enter', async () => {
    const bin = await directory(join(root, 'a', 'bin'), 0o755);
    await writeFile(join(bin, 'initdb'), '#!/bin/sh\n', { mode: 0o755 });
    expect(await blockedPath(join(bin, 'initdb'), READ | EXECUTE)).toBe(
      undefined,
    );
  });

  it('reports the first directory from the root down that others may not enter, with its mode', async () => {
    const outer = await directory(join(root, 'outer'), 0o700);
    const inner = await directory(join(outer, 'inner'), 0o700);
    const bin = await directory(join(inner, 'bin'), 0o755);
    await writeFile(join(bin, 'initdb'), '#!/bin/sh\n', { mode: 0o755 });
    expect(await blockedPath(join(bin, 'initdb'), READ | EXECUTE)).toEqual({
      path: outer,
      directory: true,
      mode: 0o700,
      missing: EXECUTE,
      who: 'o',
    });
  });

  it("applies the group's bits to a directory of the user's group", async () => {
    const shared = await directory(join(root, 'shared'), 0o750);
    await chown(shared, 0, USER.gid);
    expect(await blockedPath(shared, EXECUTE)).toBe(undefined);

    // Others may enter, but the group's bits are the user's.
    await chmod(shared, 0o705);
    expect(await blockedPath(shared, EXECUTE)).toMatchObject({
      path: shared,
      who: 'g',
    });
  });

  it("applies the owner's bits to a directory the user owns", async () => {
    const own = await directory(join(root, 'own'), 0o075);
    await chown(own, USER.uid, USER.gid);
    expect(await blockedPath(own, EXECUTE)).toMatchObject({
      path: own,
      mode: 0o075,
      who: 'u',
    });
  });

  it('reports a program that others may not read and execute', async () => {
    const bin = await directory(join(root, 'bin'), 0o755);
    const initdb = join(bin, 'initdb');
    await writeFile(initdb, '#!/bin/sh\n', { mode: 0o711 });
    expect(await blockedPath(initdb, READ | EXECUTE)).toEqual({
      path: initdb,
      directory: false,
      mode: 0o711,
      missing: READ,
      who: 'o',
    });
  });

  it('ends the walk at the first part that does not exist yet', async () => {
    expect(
      await firstBlockedPath(join(root, 'new', 'data'), EXECUTE, USER),
    ).toBe(undefined);
  });

  it('says which directory blocks the data directory, its mode, and what to do', async () => {
    const blocked = await directory(join(root, 'private'), 0o700);
    const dataDir = join(blocked, 'clone', '.data', 'postgres');
    await directory(join(blocked, 'clone'), 0o755);
    await expect(checkEmbeddedPostgresAccess(dataDir)).rejects.toThrow(
      'Embedded PostgreSQL cannot start: this process runs as root, so PostgreSQL runs as the user "postgres", ' +
        `which cannot enter ${blocked} (mode 0700), so it cannot use its data directory ${dataDir}.\n` +
        'Potential solutions:\n' +
        `- chmod o+x ${blocked}\n` +
        '- run as a user other than root\n' +
        '- set DATABASE_URL to an existing PostgreSQL server',
    );
  });
});

describeAsRoot()('startEmbeddedPostgres() failing as root', () => {
  const SETUP = new URL('./embedded-postgres.js', import.meta.url).href;
  let root: string;
  /** The temporary directory of the process, where the password file goes. */
  let tmp: string;

  beforeEach(async () => {
    root = await workspace();
    tmp = await directory(join(root, 'tmp'), 0o777);
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  /**
   * Runs startEmbeddedPostgres(options) in a node process of its own with
   * `tmp` as its temporary directory, then stops the server if it started.
   */
  const start = async (options: object, umask?: number) => {
    const script = [
      'const [setup, options, umask] = process.argv.slice(1);',
      'if (umask) process.umask(Number(umask));',
      'const { startEmbeddedPostgres } = await import(setup);',
      'const server = await startEmbeddedPostgres(JSON.parse(options));',
      'await server.stop();',
    ].join('\n');
    const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
    // Jest's flags are not this process's.
    delete env.NODE_OPTIONS;
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        script,
        SETUP,
        JSON.stringify(options),
        umask === undefined ? '' : String(umask),
      ],
      { env, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const [code] = (await once(child, 'exit')) as [number | null];
    return { code, stderr };
  };

  it('refuses a base directory that postgres may not enter, before writing anything', async () => {
    const blocked = await directory(join(root, 'private'), 0o700);
    const baseDir = await directory(join(blocked, 'base'), 0o755);
    const { code, stderr } = await start({ baseDir });
    expect(code).toBe(1);
    expect(stderr).toContain(
      `which cannot enter ${blocked} (mode 0700), so it cannot use its data directory ${baseDir}/idempotency-pg-`,
    );
    expect(stderr).toContain(`- chmod o+x ${blocked}\n`);
    expect(await readdir(baseDir)).toEqual([]);
    expect(await readdir(tmp)).toEqual([]);
  });

  it('removes the password file and the temporary directory when initdb fails', async () => {
    const baseDir = await directory(join(root, 'base'), 0o755);
    // Under umask 077 the password file is root's alone: initdb, run as
    // postgres, cannot read it.
    const { code, stderr } = await start({ baseDir }, 0o077);
    expect(code).toBe(1);
    expect(stderr).toMatch(
      /Postgres init script failed .*could not open file "[^"]*pg-password-\w+" for reading: Permission denied/s,
    );
    expect(await readdir(baseDir)).toEqual([]);
    expect(await readdir(tmp)).toEqual([]);
  });

  it('removes the temporary directory, and says why, when the server does not start', async () => {
    const baseDir = await directory(join(root, 'base'), 0o755);
    const { code, stderr } = await start({
      baseDir,
      settings: { no_such_setting: 'on' },
    });
    expect(code).toBe(1);
    expect(stderr).toMatch(
      /Embedded PostgreSQL did not start on port \d+:\n.*unrecognized configuration parameter "no_such_setting"/,
    );
    expect(await readdir(baseDir)).toEqual([]);
    expect(await readdir(tmp)).toEqual([]);
  });
});
