import { existsSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root directory. */
const root = fileURLToPath(new URL('../../', import.meta.url));

/** TypeScript sources of the library, relative to the repository root. */
export async function librarySources(): Promise<string[]> {
  const sources: string[] = [];
  for (const dir of ['src', 'migrations']) {
    const entries = await readdir(join(root, dir), { recursive: true });
    for (const entry of entries) {
      if (
        entry.endsWith('.ts') &&
        !entry.endsWith('.d.ts') &&
        !entry.endsWith('.spec.ts')
      ) {
        sources.push(join(dir, entry).split(sep).join('/'));
      }
    }
  }
  return sources;
}

/**
 * Fails unless `npm run build` compiled every current source into dist/:
 * for the tests that run the compiled library (`npm test` builds first).
 */
export async function assertBuilt(): Promise<void> {
  if (!existsSync(join(root, 'dist/src/index.js'))) {
    throw new Error(
      'dist/src/index.js is missing: run `npm run build` before this test (`npm test` does).',
    );
  }
  for (const source of await librarySources()) {
    const compiled = join(root, 'dist', source.replace(/\.ts$/, '.js'));
    const built = existsSync(compiled) ? (await stat(compiled)).mtimeMs : 0;
    if (built < (await stat(join(root, source))).mtimeMs) {
      throw new Error(
        `dist/ is older than ${source}: run \`npm run build\` before this test.`,
      );
    }
  }
}
