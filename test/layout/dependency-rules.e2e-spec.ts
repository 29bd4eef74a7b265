/**
 * The dependency rules of `npm run lint` (test/dependency-cruiser.cjs) hold
 * on the library, and catch what they are for: an import from the core
 * into TypeORM's side, a transport, the module's top-level files or
 * `outgoing/`, from `outgoing/` into anything but the core, from the caller
 * client into the rest of the library, from the PostgreSQL store into a
 * data library or its adapter, and a cycle. The check runs on a copy of
 * `src` and `migrations`, as it is and with every case's import added.
 */
import { execFile } from 'node:child_process';
import {
  cp,
  mkdtemp,
  readFile,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
const depcruise = path.join(root, 'node_modules/.bin/depcruise');

interface Check {
  readonly passed: boolean;
  readonly output: string;
}

describe('the dependency rules', () => {
  let copy: string;

  beforeAll(async () => {
    copy = await mkdtemp(path.join(tmpdir(), 'idempotency-layout-'));
    await Promise.all([
      cp(path.join(root, 'src'), path.join(copy, 'src'), { recursive: true }),
      cp(path.join(root, 'migrations'), path.join(copy, 'migrations'), {
        recursive: true,
      }),
      cp(path.join(root, 'tsconfig.json'), path.join(copy, 'tsconfig.json')),
      cp(
        path.join(root, 'test/dependency-cruiser.cjs'),
        path.join(copy, 'dependency-cruiser.cjs'),
      ),
      symlink(path.join(root, 'node_modules'), path.join(copy, 'node_modules')),
    ]);
  });
  afterAll(() => rm(copy, { recursive: true, force: true }));

  /**
   * Runs the check on the copy, with each of `added`'s lines put at the top
   * of its file for the run.
   */
  async function check(
    added: ReadonlyArray<readonly [file: string, line: string]> = [],
  ): Promise<Check> {
    const originals = new Map<string, string>();
    for (const [file, line] of added) {
      const target = path.join(copy, file);
      if (!originals.has(target)) {
        originals.set(target, await readFile(target, 'utf8'));
      }
      await writeFile(target, `${line}\n${await readFile(target, 'utf8')}`);
    }
    try {
      const { stdout } = await run(
        depcruise,
        ['src', 'migrations', '--config', 'dependency-cruiser.cjs'],
        { cwd: copy },
      );
      return { passed: true, output: stdout };
    } catch (error) {
      const { stdout = '', stderr = '' } = error as {
        stdout?: string;
        stderr?: string;
      };
      return { passed: false, output: `${stdout}${stderr}` };
    } finally {
      for (const [target, original] of originals) {
        await writeFile(target, original);
      }
    }
  }

  it('hold on the library as it is', async () => {
    const { passed, output } = await check();
    expect({ passed, output }).toEqual({
      passed: true,
      output: expect.any(String),
    });
  });

  /** What each rule is for: the import added, and the violation it gives. */
  const cases: ReadonlyArray<
    readonly [what: string, file: string, line: string, violation: string]
  > = [
    [
      'the core into typeorm/',
      'src/core/execution.ts',
      "import '../typeorm/lazy-transaction.js';",
      'core-is-inward: src/core/execution.ts → src/typeorm/lazy-transaction.ts',
    ],
    [
      'the core into http/',
      'src/core/idempotency.executor.ts',
      "import '../http/idempotency-key.js';",
      'core-is-inward: src/core/idempotency.executor.ts → src/http/idempotency-key.ts',
    ],
    [
      'the public API into a store',
      'src/idempotency.context.ts',
      "import './stores/memory/memory.store.js';",
      'core-is-inward: src/idempotency.context.ts → src/stores/memory/memory.store.ts',
    ],
    [
      'the core into TypeORM itself',
      'src/core/waiters.ts',
      "import 'typeorm';",
      'core-knows-no-driver: src/core/waiters.ts →',
    ],
    [
      'a transport into another one',
      'src/messages/idempotency.messages.ts',
      "import '../http/idempotency.http.js';",
      'transports-are-apart: src/messages/idempotency.messages.ts → src/http/idempotency.http.ts',
    ],
    [
      'the PostgreSQL store into TypeORM itself (types only)',
      'src/stores/postgres/postgres.store.ts',
      "import type { DataSource } from 'typeorm'; export type Probe = DataSource;",
      'postgres-store-knows-no-data-library: src/stores/postgres/postgres.store.ts → ',
    ],
    [
      'the PostgreSQL store into pg itself',
      'src/stores/postgres/postgres-presence.ts',
      "import 'pg';",
      'postgres-store-knows-no-data-library: src/stores/postgres/postgres-presence.ts → ',
    ],
    [
      'the PostgreSQL store into an adapter',
      'src/stores/postgres/postgres-collection.ts',
      "import '../../typeorm/typeorm.adapter.js';",
      'postgres-store-knows-no-data-library: src/stores/postgres/postgres-collection.ts → src/typeorm/typeorm.adapter.ts',
    ],
    [
      "the core into the module's options",
      'src/core/execution.ts',
      "import '../idempotency.options.js';",
      'core-is-innermost: src/core/execution.ts → src/idempotency.options.ts',
    ],
    [
      'the core into outgoing/',
      'src/core/waiters.ts',
      "import '../outgoing/idempotent-fetch.js';",
      'core-is-innermost: src/core/waiters.ts → src/outgoing/idempotent-fetch.ts',
    ],
    [
      'a contract into the public API',
      'src/interfaces/idempotency-event.interface.ts',
      "import '../idempotency.events.js';",
      'core-is-innermost: src/interfaces/idempotency-event.interface.ts → src/idempotency.events.ts',
    ],
    [
      'outgoing/ into the constants of the top level',
      'src/outgoing/idempotent-fetch.ts',
      "import '../idempotency.constants.js';",
      'outgoing-knows-only-the-core: src/outgoing/idempotent-fetch.ts → src/idempotency.constants.ts',
    ],
    [
      'outgoing/ into a transport',
      'src/outgoing/outgoing.options.ts',
      "import '../http/idempotency-key.js';",
      'outgoing-knows-only-the-core: src/outgoing/outgoing.options.ts → src/http/idempotency-key.ts',
    ],
    [
      'a store into outgoing/',
      'src/stores/memory/memory.store.ts',
      "import '../../outgoing/idempotent-fetch.js';",
      'stores-know-no-transport: src/stores/memory/memory.store.ts → src/outgoing/idempotent-fetch.ts',
    ],
    [
      'the caller client into the core',
      'src/client/idempotent-client.ts',
      "import '../core/waiters.js';",
      'client-stands-alone: src/client/idempotent-client.ts → src/core/waiters.ts',
    ],
    [
      'a cycle of files',
      'src/core/waiters.ts',
      "import './idempotency.executor.js';",
      'no-circular: src/core/idempotency.executor.ts',
    ],
  ];

  // One run with every import added (a run of depcruise parses the whole
  // library, seconds each): each rule must report its own import, which a
  // rule that let it through would leave out of the output.
  it('fail on each import that breaks a rule, each reported', async () => {
    const { passed, output } = await check(
      cases.map(([, file, line]) => [file, line] as const),
    );
    expect(passed).toBe(false);
    expect(
      cases
        .filter(([, , , violation]) => !output.includes(violation))
        .map(([what]) => what),
    ).toEqual([]);
  });
});
