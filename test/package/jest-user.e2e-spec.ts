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
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { assertBuilt } from '../utils/library-build.js';

/*
 * The packed library in the Jest test of an application that installed it
 * with its required peers only: under Jest, whose module registry says
 * `MODULE_NOT_FOUND` of a package that is not installed where Node.js says
 * `ERR_MODULE_NOT_FOUND`, the module must start without any of its
 * optional peers.
 *
 * The application is a directory outside the repository: the library
 * unpacked from `npm pack` (a copy: its imports resolve from there, never
 * from the repository's node_modules), its required peers and what the
 * application's test uses (Nest's Express platform and testing module,
 * supertest, ts-jest) linked from the repository's node_modules, and
 * jest-user/payments.spec.ts, run by the repository's Jest with the
 * application as its root directory.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));

/** What the application's own test needs besides the library's peers. */
const APPLICATION_PACKAGES = [
  '@nestjs/platform-express',
  '@nestjs/testing',
  'supertest',
  'ts-jest',
];

/**
 * Integrations the library works with that are no peers of its own: they
 * must not be there either.
 */
const INTEGRATIONS = ['@nestjs/graphql', 'nestjs-cls'];

/** The title of the application's test, as Jest reports it. */
const USER_TEST =
  'payments executes a payment once and replays it for its duplicate';

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

describe('the packed library in the Jest test of an application without optional peers', () => {
  let scratch: string;
  let app: string;
  let library: string;
  let manifest: Manifest;

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

    app = join(scratch, 'app');
    library = join(app, 'node_modules/nestjs-idempotency');
    await mkdir(library, { recursive: true });
    await run('tar', [
      '-xzf',
      join(scratch, filename),
      '-C',
      library,
      '--strip-components=1',
    ]);
    manifest = JSON.parse(
      await readFile(join(library, 'package.json'), 'utf8'),
    ) as Manifest;

    const required = [
      ...Object.keys(manifest.peerDependencies ?? {}).filter(
        (name) => !manifest.peerDependenciesMeta?.[name]?.optional,
      ),
      ...Object.keys(manifest.dependencies ?? {}),
    ];
    for (const name of [...required, ...APPLICATION_PACKAGES]) {
      if (!existsSync(join(root, 'node_modules', name))) {
        throw new Error(
          `${name} is not in the repository's node_modules: run \`npm install\`.`,
        );
      }
      await mkdir(dirname(join(app, 'node_modules', name)), {
        recursive: true,
      });
      await symlink(
        join(root, 'node_modules', name),
        join(app, 'node_modules', name),
        'dir',
      );
    }

    await writeFile(
      join(app, 'package.json'),
      JSON.stringify(
        {
          name: 'jest-user-app',
          private: true,
          type: 'module',
          dependencies: { 'nestjs-idempotency': `file:../${filename}` },
          jest: {
            testEnvironment: 'node',
            extensionsToTreatAsEsm: ['.ts'],
            transform: { '^.+\\.ts$': ['ts-jest', { useESM: true }] },
            testTimeout: 30_000,
          },
        },
        null,
        2,
      ),
    );
    await writeFile(
      join(app, 'tsconfig.json'),
      JSON.stringify(
        {
          compilerOptions: {
            module: 'nodenext',
            moduleResolution: 'nodenext',
            target: 'es2022',
            // Compiled file by file, without a type check: the test is
            // about what runs.
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
    await copyFile(
      join(root, 'test/package/jest-user/payments.spec.ts'),
      join(app, 'payments.spec.ts'),
    );
  }, 60_000);

  afterAll(async () => {
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('has none of the optional peers where the application or the library would find them', () => {
    const optional = Object.keys(manifest.peerDependenciesMeta ?? {}).filter(
      (name) => manifest.peerDependenciesMeta?.[name]?.optional,
    );
    expect(optional).toEqual(
      expect.arrayContaining([
        '@nestjs/swagger',
        '@opentelemetry/api',
        'graphql',
        'bullmq',
        '@nestjs/bullmq',
        '@nestjs/microservices',
        'typeorm',
        '@nestjs/typeorm',
        'pg',
        'ioredis',
        '@aws-sdk/client-dynamodb',
        '@nestjs-cls/transactional',
        'typeorm-transactional',
      ]),
    );
    const found = [...optional, ...INTEGRATIONS].flatMap((name) =>
      [app, library]
        .map((from) => installedFrom(from, name))
        .filter((at) => at !== undefined),
    );
    expect(found).toEqual([]);
    expect(relative(root, library).startsWith('..')).toBe(true);
  });

  it("boots the module in the application's test and replays a duplicate request", async () => {
    const outputFile = join(scratch, 'results.json');
    const jest = await run(
      process.execPath,
      [
        join(root, 'node_modules/jest/bin/jest.js'),
        '--rootDir',
        app,
        '--ci',
        '--no-watchman',
        '--cacheDirectory',
        join(scratch, 'jest-cache'),
        '--json',
        '--outputFile',
        outputFile,
      ],
      {
        cwd: app,
        env: childEnv({ NODE_OPTIONS: '--experimental-vm-modules' }),
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
    const results = JSON.parse(
      await readFile(outputFile, 'utf8'),
    ) as JestResults;
    expect({
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
    }).toEqual({
      code: 0,
      failures: [],
      tests: [{ fullName: USER_TEST, status: 'passed' }],
    });
  }, 120_000);
});
