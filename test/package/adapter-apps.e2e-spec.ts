/**
 * Each data library's adapter, as an application outside the repository
 * uses it: the packed tarball installed with that library and pg only (no
 * TypeORM), the module's schema applied from the package's SQL files with
 * psql, and the payments promise of test/adapters held over HTTP.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  access,
  copyFile,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describePaymentsPromise } from '../adapters/payments-promise.js';
import { PAYMENTS_SQL } from '../adapters/adapter-app.js';
import { assertBuilt } from '../utils/library-build.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import {
  childEnv,
  installedVersion,
  listening,
  npmInstall,
  packLibrary,
  root,
  stop,
  type AppOutput,
} from './packed-library.js';

const run = promisify(execFile);

/** What every application installs beside the package and its library. */
const BASE = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  '@nestjs/schedule',
  'pg',
  'rxjs',
  'reflect-metadata',
  '@types/node',
  '@types/pg',
];

/** One application: its file in adapter-apps/ and what it installs. */
interface AdapterAppSpec {
  readonly name: string;
  readonly packages: readonly string[];
  /** What the application does before it compiles, in its folder. */
  prepare?(appDir: string): Promise<void>;
}

const APPS: readonly AdapterAppSpec[] = [
  { name: 'pg', packages: [] },
  { name: 'drizzle', packages: ['drizzle-orm'] },
  { name: 'kysely', packages: ['kysely'] },
  {
    name: 'prisma',
    packages: ['@prisma/client', '@prisma/adapter-pg', 'prisma'],
    // Its client, generated as the application's own build does (offline:
    // no schema engine is needed to generate).
    async prepare(appDir) {
      await mkdir(join(appDir, 'prisma'));
      await copyFile(
        join(root, 'test/adapters/prisma/schema.prisma'),
        join(appDir, 'prisma/schema.prisma'),
      );
      const app = join(appDir, 'prisma.app.ts');
      await writeFile(
        app,
        (await readFile(app, 'utf8')).replace(
          '../../adapters/prisma/generated/client.js',
          './prisma/generated/client.js',
        ),
      );
      await run(
        process.execPath,
        [
          join(appDir, 'node_modules/prisma/build/index.js'),
          'generate',
          '--schema',
          'prisma/schema.prisma',
        ],
        {
          cwd: appDir,
          env: childEnv({ PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true' }),
        },
      );
    },
  },
];

let packed: string;
/** Each application's folder, ready to run, once its build ended. */
const builds = new Map<string, Promise<string>>();

/** `npm install`s `packages` in `dir`, at the repository's versions but the tarball. */
async function install(dir: string, packages: readonly string[]) {
  await npmInstall(
    dir,
    await Promise.all(
      packages.map(async (name) =>
        name.endsWith('.tgz')
          ? name
          : `${name}@${await installedVersion(name)}`,
      ),
    ),
  );
}

/**
 * Builds `spec`'s application in `appDir`, a copy of `base` (the package
 * and BASE installed): its data library added with npm, its files, its
 * `prepare`, then compiled.
 */
async function build(
  spec: AdapterAppSpec,
  base: string,
  appDir: string,
): Promise<string> {
  await run('cp', ['-a', base, appDir]);
  if (spec.packages.length > 0) {
    await install(appDir, spec.packages);
  }
  for (const file of ['payments.ts', `${spec.name}.app.ts`]) {
    await copyFile(
      join(root, 'test/package/adapter-apps', file),
      join(appDir, file),
    );
  }
  await spec.prepare?.(appDir);
  await writeFile(
    join(appDir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        skipLibCheck: true,
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        types: ['node'],
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
      },
      files: ['payments.ts', `${spec.name}.app.ts`],
    }),
  );
  await run(
    process.execPath,
    [join(root, 'node_modules/typescript/bin/tsc'), '-p', appDir],
    { cwd: appDir, env: childEnv() },
  ).catch((error: { stdout?: string }) => {
    throw new Error(`the application does not compile:\n${error.stdout}`);
  });
  return appDir;
}

// The package and BASE are installed once, in a folder beside the tarball;
// each application starts as a copy of it (at the same depth, so that its
// `file:` dependency on the tarball still resolves) and adds its data
// library. The applications build at the same time, each test group then
// waits for its own.
beforeAll(async () => {
  await assertBuilt();
  packed = await mkdtemp(join(tmpdir(), 'idempotency-packed-'));
  const { tarball } = await packLibrary(packed);
  const base = join(packed, 'base');
  await mkdir(base);
  await writeFile(
    join(base, 'package.json'),
    JSON.stringify({ name: 'adapter-app', private: true, type: 'module' }),
  );
  await install(base, [tarball, ...BASE]);
  for (const spec of APPS) {
    const building = build(spec, base, join(packed, spec.name));
    // Awaited by its test group; a failure fails that group only.
    building.catch(() => undefined);
    builds.set(spec.name, building);
  }
}, 120_000);
afterAll(async () => {
  await Promise.allSettled(builds.values());
  if (packed) {
    await rm(packed, { recursive: true, force: true });
  }
});

describe.each(APPS.map((spec) => [spec.name, spec] as const))(
  'the packed library on %s, outside the repository',
  (_name, spec) => {
    let appDir: string;
    let db: TestDatabase | undefined;
    let child: ChildProcess | undefined;
    let url: string;
    const output: AppOutput = { lines: [], stderr: '' };

    beforeAll(async () => {
      appDir = await builds.get(spec.name)!;
      db = await createTestDatabase();
      // The schema as an application without TypeORM applies it: the
      // package's SQL files, in order, with psql.
      const sql = join(
        appDir,
        'node_modules/nestjs-idempotency/migrations/sql',
      );
      for (const file of (await readdir(sql)).sort()) {
        await run('psql', [
          '--single-transaction',
          '-v',
          'ON_ERROR_STOP=1',
          '-q',
          '-f',
          join(sql, file),
          db.url,
        ]);
      }
      await db.query(PAYMENTS_SQL);
      child = spawn(process.execPath, [`${spec.name}.app.js`], {
        cwd: appDir,
        env: childEnv({ DATABASE_URL: db.url }),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      url = await listening(child, output);
    }, 180_000);

    afterAll(async () => {
      if (child) {
        await stop(child);
      }
      await db?.drop();
    }, 30_000);

    it('has neither TypeORM nor another data library installed', async () => {
      const installed = (name: string) =>
        access(join(appDir, 'node_modules', name)).then(
          () => name,
          () => undefined,
        );
      const found = await Promise.all(
        [
          'typeorm',
          '@nestjs/typeorm',
          'drizzle-orm',
          'kysely',
          '@prisma/client',
        ]
          .filter((name) => !spec.packages.includes(name))
          .map(installed),
      );
      expect(found.filter(Boolean)).toEqual([]);
      expect(output.lines[0]).toBe(
        `library: file://${join(appDir, 'node_modules/nestjs-idempotency/dist/src/index.js')}`,
      );
    });

    describePaymentsPromise(() => ({ url, db: db! }));

    if (spec.name === 'pg') {
      it("runs the package's command line with pg alone: `npx nestjs-idempotency --help`, and `inspect --json` of a completed key", async () => {
        const npx = (...args: string[]) =>
          run('npx', ['--no-install', 'nestjs-idempotency', ...args], {
            cwd: appDir,
            env: childEnv({ DATABASE_URL: db!.url }),
          });
        const help = await npx('--help');
        expect(help.stdout).toMatch(/^Usage: nestjs-idempotency <command>/);
        const [{ scope, key }] = await db!.query<{
          scope: string;
          key: string;
        }>(
          `SELECT scope, key FROM idempotency_records WHERE status = 'completed' LIMIT 1`,
        );
        const inspected = JSON.parse(
          (await npx('inspect', key, '--scope', scope, '--json')).stdout,
        ) as { status: string; key: string };
        expect(inspected).toMatchObject({ key, status: 'completed' });
      });
    }
  },
);
