import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import {
  copyFile,
  mkdir,
  mkdtemp,
  readFile,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { assertBuilt } from '../utils/library-build.js';

/*
 * The packed library in the Jest tests of applications that installed it,
 * run as the README's "Testing your application" shows them (its Jest
 * configuration is jest-user/jest.config.js, quoted there):
 *
 * - an application with the library's required peers only: under Jest,
 *   whose module registry says `MODULE_NOT_FOUND` of a package that is not
 *   installed where Node.js says `ERR_MODULE_NOT_FOUND`, the module must
 *   start without any of its optional peers (jest-user/payments.spec.ts, a
 *   test module of its own on `IdempotencyTestingModule`);
 * - an application set up as the README's five-minute setup, on TypeORM,
 *   @nestjs/typeorm and pg (optional peers of the library, dependencies of
 *   this application) and no other optional peer, whose test replaces the
 *   module's store and the DataSource, and runs with no database to reach
 *   (jest-user/typeorm-app).
 *
 * Each application is a directory outside the repository: the library
 * unpacked from `npm pack` (a copy: its imports resolve from there, never
 * from the repository's node_modules), the packages it installed linked
 * from the repository's node_modules, and its files, run by the
 * repository's Jest with the application as its root directory.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const here = join(root, 'test/package/jest-user');

/** What the applications' tests need besides the library's peers. */
const APPLICATION_PACKAGES = [
  '@nestjs/platform-express',
  '@nestjs/testing',
  'supertest',
  'ts-jest',
];

/** What the TypeORM application installed for its own setup. */
const TYPEORM_PACKAGES = ['typeorm', '@nestjs/typeorm', 'pg'];

/**
 * Integrations the library works with that are no peers of its own: they
 * must not be there either.
 */
const INTEGRATIONS = ['@nestjs/graphql', 'nestjs-cls'];

/** The title of each application's test, as Jest reports it. */
const USER_TEST =
  'payments executes a payment once and replays it for its duplicate';

/**
 * Where nothing listens: the TypeORM application's `DATABASE_URL`, so that
 * a connection attempt fails its test.
 */
const NO_DATABASE = 'postgres://postgres@127.0.0.1:9/none';

interface Manifest {
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

/** What `jest --json` writes of a run, as far as this test reads it. */
interface JestResults {
  numTotalTests: number;
  testResults: Array<{
    message: string;
    assertionResults: Array<{ fullName: string; status: string }>;
  }>;
}

/** The environment of a child process, without what Jest and npm add. */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (
      !['NODE_OPTIONS', 'NODE_PATH', 'INIT_CWD', 'JEST_WORKER_ID'].includes(
        name,
      ) &&
      !/^npm_/i.test(name)
    ) {
      env[name] = value;
    }
  }
  return { ...env, NO_COLOR: '1', ...extra };
}

/**
 * The directory of `name` where Node.js or Jest would find it from `dir`
 * (a `node_modules` of `dir` or of a directory above it), if any.
 */
function installedFrom(dir: string, name: string): string | undefined {
  for (let at = dir; ; at = dirname(at)) {
    const candidate = join(at, 'node_modules', name);
    if (existsSync(candidate)) {
      return candidate;
    }
    if (dirname(at) === at) {
      return undefined;
    }
  }
}

/** The optional peers of the library, by its manifest. */
function optionalPeers(manifest: Manifest): string[] {
  return Object.keys(manifest.peerDependenciesMeta ?? {}).filter(
    (name) => manifest.peerDependenciesMeta?.[name]?.optional,
  );
}

/** An application's directory, and where its copy of the library is. */
interface Application {
  readonly dir: string;
  readonly library: string;
}

/**
 * Makes an application in `dir`: the library unpacked from `tarball`, its
 * required peers, `packages` linked from the repository, the Jest
 * configuration the README quotes, and `files` (paths relative to
 * jest-user/, copied to the application's root).
 */
async function createApplication(
  dir: string,
  tarball: string,
  packages: readonly string[],
  files: readonly string[],
): Promise<Application> {
  const library = join(dir, 'node_modules/nestjs-idempotency');
  await mkdir(library, { recursive: true });
  await run('tar', ['-xzf', tarball, '-C', library, '--strip-components=1']);
  const manifest = JSON.parse(
    await readFile(join(library, 'package.json'), 'utf8'),
  ) as Manifest;
  const required = [
    ...Object.keys(manifest.peerDependencies ?? {}).filter(
      (name) => !optionalPeers(manifest).includes(name),
    ),
    ...Object.keys(manifest.dependencies ?? {}),
  ];
  for (const name of [...required, ...packages]) {
    if (!existsSync(join(root, 'node_modules', name))) {
      throw new Error(
        `${name} is not in the repository's node_modules: run \`npm install\`.`,
      );
    }
    await mkdir(dirname(join(dir, 'node_modules', name)), { recursive: true });
    await symlink(
      join(root, 'node_modules', name),
      join(dir, 'node_modules', name),
      'dir',
    );
  }

  await writeFile(
    join(dir, 'package.json'),
    JSON.stringify(
      {
        name: 'jest-user-app',
        private: true,
        type: 'module',
        scripts: { test: 'NODE_OPTIONS=--experimental-vm-modules jest' },
        dependencies: { 'nestjs-idempotency': `file:../${basename(tarball)}` },
      },
      null,
      2,
    ),
  );
  await writeFile(
    join(dir, 'tsconfig.json'),
    JSON.stringify(
      {
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          // Compiled file by file, without a type check: the test is
          // about what runs (the repository's lint type-checks the files).
          isolatedModules: true,
          experimentalDecorators: true,
          emitDecoratorMetadata: true,
          esModuleInterop: true,
        },
      },
      null,
      2,
    ),
  );
  for (const file of ['jest.config.js', ...files]) {
    await copyFile(join(here, file), join(dir, basename(file)));
  }
  return { dir, library };
}

/** Runs the application's Jest; what it reported, or why it reported nothing. */
async function runJest(
  application: Application,
  scratch: string,
  env: Record<string, string> = {},
) {
  const outputFile = join(application.dir, 'results.json');
  const jest = await run(
    process.execPath,
    [
      join(root, 'node_modules/jest/bin/jest.js'),
      '--rootDir',
      application.dir,
      '--ci',
      '--no-watchman',
      '--cacheDirectory',
      join(scratch, 'jest-cache'),
      // A machine busy with the rest of the suite may take more than
      // Jest's default 5 s to boot an application.
      '--testTimeout',
      '30000',
      '--json',
      '--outputFile',
      outputFile,
    ],
    {
      cwd: application.dir,
      // The application's `npm test`: its package.json `test` script.
      env: childEnv({ NODE_OPTIONS: '--experimental-vm-modules', ...env }),
      timeout: 90_000,
    },
  ).then(
    () => ({ code: 0, stderr: '' }),
    (error: { code?: unknown; stderr?: string }) => ({
      code: error.code,
      stderr: error.stderr ?? String(error),
    }),
  );
  if (!existsSync(outputFile)) {
    throw new Error(`Jest reported no results:\n${jest.stderr}`);
  }
  const results = JSON.parse(await readFile(outputFile, 'utf8')) as JestResults;
  return {
    code: jest.code,
    failures: results.testResults
      .map((file) => file.message)
      .filter((message) => message !== ''),
    tests: results.testResults.flatMap((file) =>
      file.assertionResults.map(({ fullName, status }) => ({
        fullName,
        status,
      })),
    ),
  };
}

/** The packages of `names` that `application` or its library would find. */
function foundIn(application: Application, names: readonly string[]): string[] {
  return names.flatMap((name) =>
    [application.dir, application.library]
      .map((from) => installedFrom(from, name))
      .filter((at) => at !== undefined),
  );
}

describe('the packed library in the Jest tests of applications', () => {
  let scratch: string;
  let manifest: Manifest;
  let bare: Application;
  let typeormApp: Application;

  beforeAll(async () => {
    await assertBuilt();
    scratch = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-jest-user-'));
    const { stdout } = await run(
      'npm',
      ['pack', '--pack-destination', scratch, '--json', '--loglevel=error'],
      { cwd: root, env: childEnv(), timeout: 60_000 },
    );
    // Anything a pack script prints comes before the JSON report.
    const [{ filename }] = JSON.parse(stdout.slice(stdout.search(/^\[/m))) as [
      { filename: string },
    ];
    const tarball = join(scratch, filename);
    bare = await createApplication(
      join(scratch, 'app'),
      tarball,
      APPLICATION_PACKAGES,
      ['payments.spec.ts'],
    );
    typeormApp = await createApplication(
      join(scratch, 'typeorm-app'),
      tarball,
      [...APPLICATION_PACKAGES, ...TYPEORM_PACKAGES],
      [
        'typeorm-app/app.module.ts',
        'typeorm-app/payments.controller.ts',
        'typeorm-app/app.spec.ts',
      ],
    );
    manifest = JSON.parse(
      await readFile(join(bare.library, 'package.json'), 'utf8'),
    ) as Manifest;
  }, 60_000);

  afterAll(async () => {
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('has none of the optional peers where the application or the library would find them', () => {
    expect(optionalPeers(manifest)).toEqual(
      expect.arrayContaining([
        '@nestjs/swagger',
        '@opentelemetry/api',
        'graphql',
        'bullmq',
        '@nestjs/bullmq',
        '@nestjs/microservices',
        ...TYPEORM_PACKAGES,
        'ioredis',
        '@aws-sdk/client-dynamodb',
        '@nestjs-cls/transactional',
        'typeorm-transactional',
      ]),
    );
    expect(
      foundIn(bare, [...optionalPeers(manifest), ...INTEGRATIONS]),
    ).toEqual([]);
    expect(relative(root, bare.library).startsWith('..')).toBe(true);
  });

  it("boots the module in the application's test and replays a duplicate request", async () => {
    expect(await runJest(bare, scratch)).toEqual({
      code: 0,
      failures: [],
      tests: [{ fullName: USER_TEST, status: 'passed' }],
    });
  }, 120_000);

  it('has of the optional peers only those of its TypeORM setup in the TypeORM application', () => {
    const others = optionalPeers(manifest).filter(
      (name) => !TYPEORM_PACKAGES.includes(name),
    );
    expect(foundIn(typeormApp, [...others, ...INTEGRATIONS])).toEqual([]);
    expect(foundIn(typeormApp, TYPEORM_PACKAGES)).toHaveLength(
      2 * TYPEORM_PACKAGES.length,
    );
  });

  it("runs the application module's test on a memory store, with no database to reach", async () => {
    expect(
      await runJest(typeormApp, scratch, { DATABASE_URL: NO_DATABASE }),
    ).toEqual({
      code: 0,
      failures: [],
      tests: [{ fullName: USER_TEST, status: 'passed' }],
    });
  }, 120_000);
});
