import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  access,
  copyFile,
  mkdir,
  mkdtemp,
  rm,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { assertBuilt, librarySources } from '../utils/library-build.js';
import { idempotencySqlMigrations } from '../../migrations/index.js';
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

/*
 * The package as published: `npm pack` of the built repository, installed
 * with its peers into a directory outside the source tree, and used by a
 * plain JavaScript application (consumer-app.js).
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const run = promisify(execFile);

/** The peers a consumer installs, at the versions the repository tests with. */
const PEERS = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  '@nestjs/schedule',
  '@nestjs/typeorm',
  'typeorm',
  'pg',
  'rxjs',
  'reflect-metadata',
];

/**
 * What a TypeScript application on the PostgreSQL store compiles with:
 * Node's and pg's type definitions (pg ships none).
 */
const TYPES = ['@types/node', '@types/pg'];

/**
 * A TypeScript file of that application, type-checked with `skipLibCheck`
 * off, so that every declaration file of the package it reaches is checked
 * too: the main entry must name no type of a package the application does
 * not have (ioredis, the AWS SDK).
 */
const TYPED_CONSUMER = `
import { Body, Controller, Module, Post } from '@nestjs/common';
import {
  IdempotencyContext,
  IdempotencyModule,
  Idempotent,
  MemoryIdempotencyStore,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import { idempotencyMigrations } from 'nestjs-idempotency/migrations';

@Controller('payments')
export class PaymentsController {
  constructor(private readonly idempotency: IdempotencyContext) {}

  @Post()
  @Idempotent({ ttl: '1d' })
  create(@Body() body: { reference: string }): Promise<{ charge: string }> {
    return this.idempotency.step('charge', () => ({ charge: body.reference }));
  }
}

const store: IdempotencyStore = new MemoryIdempotencyStore();

@Module({
  imports: [IdempotencyModule.forRoot({ store })],
  controllers: [PaymentsController],
})
export class AppModule {}

export const migrations: unknown[] = idempotencyMigrations;
`;

/** The peers the package must declare, never depend on. */
const REQUIRED_PEERS = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/schedule',
  '@nestjs/typeorm',
  'typeorm',
  'pg',
  'rxjs',
  'reflect-metadata',
];

/**
 * The repository's folders of which the package holds only the Markdown
 * guides its own documents link to (and the plain SQL of the migrations).
 */
const SOURCE_FOLDERS =
  /^package\/(test|sample-app|dist-sample|src|migrations)\//;

describe('the published package', () => {
  let scratch: string;
  let tarball: string;
  let files: string[];

  beforeAll(async () => {
    await assertBuilt();
    scratch = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-package-'));
    ({ tarball, files } = await packLibrary(scratch));
  }, 30_000);

  afterAll(async () => {
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('holds the compiled library, its migrations and README', async () => {
    expect(files).toEqual(
      expect.arrayContaining([
        'package/package.json',
        'package/README.md',
        'package/dist/src/index.js',
        'package/dist/src/index.d.ts',
        'package/dist/migrations/index.js',
        'package/dist/migrations/index.d.ts',
      ]),
    );
    const migrations = (await librarySources()).filter((source) =>
      source.startsWith('migrations/'),
    );
    expect(migrations.length).toBeGreaterThan(1);
    for (const migration of migrations) {
      const compiled = `package/dist/${migration.replace(/\.ts$/, '')}`;
      expect(files).toContain(`${compiled}.js`);
      expect(files).toContain(`${compiled}.d.ts`);
    }
    // Each migration as plain SQL, for applications without TypeORM.
    expect(files.filter((file) => file.endsWith('.sql')).sort()).toEqual(
      (await idempotencySqlMigrations()).map(
        ({ fileName }) => `package/migrations/sql/${fileName}`,
      ),
    );
  });

  it('holds no sources, tests, sample app or dependencies, only their guides', () => {
    const unwanted = files.filter(
      (file) =>
        (/\.[cm]?ts$/.test(file) && !/\.d\.[cm]?ts$/.test(file)) ||
        (SOURCE_FOLDERS.test(file) &&
          !file.endsWith('.md') &&
          !/^package\/migrations\/sql\/[^/]+\.sql$/.test(file)) ||
        file.includes('node_modules/') ||
        file.endsWith('.tgz'),
    );
    expect(unwanted).toEqual([]);
  });

  it('holds no compiled file whose source is gone', async () => {
    const sources = new Set(await librarySources());
    const orphans = files
      .filter((file) => /^package\/dist\/.*\.js$/.test(file))
      .map((file) => file.replace(/^package\/dist\//, '').replace(/\.js$/, ''))
      .filter((file) => !sources.has(`${file}.ts`));
    expect(orphans).toEqual([]);
  });

  it('holds every entry point its package.json names', async () => {
    const manifest = JSON.parse(
      (await run('tar', ['-xzOf', tarball, 'package/package.json'])).stdout,
    ) as { main?: string; types?: string; exports?: unknown };
    const targets = new Set<string>();
    const collect = (value: unknown): void => {
      if (typeof value === 'string') {
        targets.add(value);
      } else if (value && typeof value === 'object') {
        Object.values(value).forEach(collect);
      }
    };
    collect([manifest.main, manifest.types, manifest.exports]);
    expect(targets.size).toBeGreaterThan(0);
    for (const target of targets) {
      expect(files).toContain(`package/${target.replace(/^\.\//, '')}`);
    }
  });

  it('declares the framework, TypeORM and the driver as peers, not dependencies', async () => {
    const manifest = JSON.parse(
      (await run('tar', ['-xzOf', tarball, 'package/package.json'])).stdout,
    ) as {
      dependencies?: Record<string, string>;
      peerDependencies?: Record<string, string>;
    };
    expect(Object.keys(manifest.peerDependencies ?? {})).toEqual(
      expect.arrayContaining(REQUIRED_PEERS),
    );
    const dependencies = Object.keys(manifest.dependencies ?? {});
    expect(dependencies.filter((name) => PEERS.includes(name))).toEqual([]);
  });

  it('makes TypeORM, @nestjs/typeorm and pg optional peers: only the PostgreSQL store loads them', async () => {
    const manifest = JSON.parse(
      (await run('tar', ['-xzOf', tarball, 'package/package.json'])).stdout,
    ) as {
      peerDependenciesMeta?: Record<string, { optional?: boolean }>;
    };
    for (const name of ['typeorm', '@nestjs/typeorm', 'pg']) {
      expect(manifest.peerDependenciesMeta?.[name]).toEqual({ optional: true });
    }
  });

  describe('installed in an application outside the repository', () => {
    let appDir: string;
    let db: TestDatabase | undefined;
    let child: ChildProcess | undefined;
    let url: string;
    const output: AppOutput = { lines: [], stderr: '' };

    beforeAll(async () => {
      if (!tarball) {
        throw new Error('No tarball: packing failed (see the error above).');
      }
      appDir = join(scratch, 'app');
      await mkdir(appDir);
      await writeFile(
        join(appDir, 'package.json'),
        JSON.stringify(
          { name: 'consumer-app', private: true, type: 'module' },
          null,
          2,
        ),
      );
      await copyFile(
        join(root, 'test/package/consumer-app.js'),
        join(appDir, 'app.js'),
      );
      const peers = await Promise.all(
        [...PEERS, ...TYPES].map(
          async (name) => `${name}@${await installedVersion(name)}`,
        ),
      );
      await npmInstall(appDir, [tarball, ...peers]);

      db = await createTestDatabase();
      child = spawn(process.execPath, ['app.js'], {
        cwd: appDir,
        env: childEnv({ DATABASE_URL: db.url }),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      url = await listening(child, output);
    }, 90_000);

    afterAll(async () => {
      if (child) {
        await stop(child);
      }
      await db?.drop();
    }, 30_000);

    it('resolves the library from its own node_modules', () => {
      const library = output.lines
        .find((line) => line.startsWith('library: '))
        ?.slice('library: '.length);
      expect(library).toBe(
        pathToFileURL(
          join(appDir, 'node_modules/nestjs-idempotency/dist/src/index.js'),
        ).href,
      );
      expect(relative(root, fileURLToPath(library!)).startsWith('..')).toBe(
        true,
      );
    });

    it('type-checks in a TypeScript application with skipLibCheck off, without ioredis or the AWS SDK', async () => {
      await writeFile(join(appDir, 'typed.ts'), TYPED_CONSUMER);
      await writeFile(
        join(appDir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            noEmit: true,
            strict: true,
            skipLibCheck: false,
            module: 'nodenext',
            moduleResolution: 'nodenext',
            target: 'es2022',
            // TypeORM's own declarations use esnext's disposables.
            lib: ['esnext'],
            types: ['node'],
            experimentalDecorators: true,
            emitDecoratorMetadata: true,
          },
          files: ['typed.ts'],
        }),
      );
      const installed = (name: string) =>
        access(join(appDir, 'node_modules', name)).then(
          () => true,
          () => false,
        );
      expect({
        ioredis: await installed('ioredis'),
        aws: await installed('@aws-sdk/client-dynamodb'),
      }).toEqual({ ioredis: false, aws: false });
      const tsc = join(root, 'node_modules/typescript/bin/tsc');
      const checked = await run(process.execPath, [tsc, '-p', appDir], {
        cwd: appDir,
        env: childEnv(),
      }).then(
        () => 'no errors',
        (error: { stdout?: string }) => error.stdout ?? String(error),
      );
      expect(checked).toBe('no errors');
    }, 60_000);

    it('executes a request once and replays it for its duplicate', async () => {
      const post = () =>
        fetch(`${url}/payments`, {
          method: 'POST',
          headers: {
            'Content-Type': 'application/json',
            'Idempotency-Key': 'K',
          },
          body: JSON.stringify({ reference: 'p-1', amount: 1250 }),
        });

      const first = await post();
      const firstBody = await first.text();
      expect({ status: first.status, stderr: output.stderr }).toEqual({
        status: 201,
        stderr: '',
      });
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(JSON.parse(firstBody)).toEqual({
        id: 1,
        reference: 'p-1',
        amount: 1250,
        receipt: expect.any(String),
      });

      const second = await post();
      expect(second.status).toBe(201);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(await second.text()).toBe(firstBody);

      expect(await db!.query('SELECT reference, amount FROM payments')).toEqual(
        [{ reference: 'p-1', amount: 1250 }],
      );
      expect(
        await db!.query(
          'SELECT key, status, response_status FROM idempotency_records',
        ),
      ).toEqual([{ key: 'K', status: 'completed', response_status: 201 }]);
    }, 30_000);
  });
});
