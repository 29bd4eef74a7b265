/**
 * The Prisma clients the adapter's tests and the modes bench run on are
 * committed (the test command type-checks them before any test runs): each
 * must be what `prisma generate` makes of its schema.prisma
 * (test/adapters/prisma/, test/bench/prisma/) with the installed Prisma,
 * formatted by Prettier, or they would run on another client than
 * Prisma's.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import prettier from 'prettier';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');

/** The files under `dir`, relative, sorted. */
async function filesOf(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)))
    .sort();
}

describe.each(['test/adapters/prisma', 'test/bench/prisma'])(
  'the committed Prisma client of %s',
  (relative) => {
    const folder = path.join(root, relative);
    let generated: string;

    beforeAll(async () => {
      generated = await mkdtemp(path.join(tmpdir(), 'prisma-client-'));
      await copyFile(
        path.join(folder, 'schema.prisma'),
        path.join(generated, 'schema.prisma'),
      );
      const cli = createRequire(import.meta.url).resolve(
        'prisma/build/index.js',
      );
      await run(
        process.execPath,
        [cli, 'generate', '--schema', path.join(generated, 'schema.prisma')],
        {
          cwd: generated,
          env: {
            ...process.env,
            // Generating needs no engine: none is downloaded.
            PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true',
            CHECKPOINT_DISABLE: '1',
            PRISMA_HIDE_UPDATE_MESSAGE: '1',
          },
        },
      );
    }, 60_000);
    afterAll(() => rm(generated, { recursive: true, force: true }));

    it('is what prisma generate makes of the schema, formatted', async () => {
      const fresh = path.join(generated, 'generated');
      const committed = path.join(folder, 'generated');
      const files = await filesOf(fresh);
      expect(await filesOf(committed)).toEqual(files);
      const options = await prettier.resolveConfig(
        path.join(committed, 'x.ts'),
      );
      const stale: string[] = [];
      for (const file of files) {
        const made = await prettier.format(
          await readFile(path.join(fresh, file), 'utf8'),
          { ...options, filepath: path.join(committed, file) },
        );
        if (made !== (await readFile(path.join(committed, file), 'utf8'))) {
          stale.push(file);
        }
      }
      // Regenerate it as its schema.prisma says.
      expect(stale).toEqual([]);
    });
  },
);
