import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * @internal The package's SQL files (`migrations/sql/`, generated from the
 * TypeORM migrations and checked against them by the test suite), in the
 * order they apply: the schema as plain SQL for `nestjs-idempotency sql`.
 * @throws Error when the package holds none.
 */
export async function schemaFiles(): Promise<
  Array<{ readonly fileName: string; readonly sql: string }>
> {
  // From this file (under src/ or dist/src/) up to the package's root.
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'migrations', 'sql'))) {
    const parent = dirname(dir);
    if (parent === dir) {
      throw new Error(
        "The package's migrations/sql/ folder is missing: reinstall nestjs-idempotency.",
      );
    }
    dir = parent;
  }
  const folder = join(dir, 'migrations', 'sql');
  const names = (await readdir(folder))
    .filter((name) => name.endsWith('.sql'))
    .sort();
  return Promise.all(
    names.map(async (fileName) => ({
      fileName,
      sql: await readFile(join(folder, fileName), 'utf8'),
    })),
  );
}
