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
  npm,
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

let tarball: string;
let packed: string;

beforeAll(async () => {
  await assertBuilt();
  packed = await mkdtemp(join(tmpdir(), 'idempotency-packed-'));
  ({ tarball } = await packLibrary(packed));
}, 60_000);
afterAll(async () => {
  if (packed) {
    await rm(packed, { recursive: true, force: true });
  }
});

describe.each(APPS.map((spec) => [spec.name, spec] as const))(
  'the packed library on %s, outside the repository',
  (_name, spec) => {
    let scratch: string;
    let db: TestDatabase | undefined;
    let child: ChildProcess | undefined;
    let url: string;
    const output: AppOutput = { lines: [], stderr: '' };

    beforeAll(async () => {
      scratch = await mkdtemp(join(tmpdir(), `idempotency-${spec.name}-app-`));
      const appDir = join(scratch, 'app');
      await mkdir(appDir);
      await writeFile(
        join(appDir, 'package.json'),
        JSON.stringify({
          name: `${spec.name}-app`,
          private: true,
          type: 'module',
        }),
      );
      const packages = await Promise.all(
        [...BASE, ...spec.packages].map(
          async (name) => `${name}@${await installedVersion(name)}`,
        ),
      );
      await npm(
        [
          'install',
          '--prefer-offline',
          '--no-audit',
          '--no-fund',
          '--ignore-scripts',
          '--loglevel=error',
          tarball,
          ...packages,
        ],
        appDir,
      );
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
      if (scratch) {
        await rm(scratch, { recursive: true, force: true });
      }
    }, 30_000);

    it('has neither TypeORM nor another data library installed', async () => {
      const installed = (name: string) =>
        access(join(scratch, 'app/node_modules', name)).then(
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
        `library: file://${join(scratch, 'app/node_modules/nestjs-idempotency/dist/src/index.js')}`,
      );
    });

    describePaymentsPromise(() => ({ url, db: db! }));

    if (spec.name === 'pg') {
      it("runs the package's command line with pg alone: `npx nestjs-idempotency --help`, and `inspect --json` of a completed key", async () => {
        const appDir = join(scratch, 'app');
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
