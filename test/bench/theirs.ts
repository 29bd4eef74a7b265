import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

/** The other library, installed for this run. */
export interface Theirs {
  readonly dir: string;
  /** Installed versions, by package. */
  readonly versions: Readonly<Record<string, string>>;
}

/**
 * Installs @node-idempotency/nestjs at `version` and its Redis storage
 * adapter in a temporary directory (the caller removes it). Its peers
 * (NestJS ^9 || ^10) are not installed (--legacy-peer-deps): the app gives
 * it the repository's NestJS.
 */
export async function installTheirs(version: string): Promise<Theirs> {
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-bench-theirs-'));
  const packages = [
    '@node-idempotency/nestjs',
    '@node-idempotency/storage-adapter-redis',
  ];
  try {
    await promisify(execFile)('npm', [
      'install',
      '--prefix',
      dir,
      '--no-save',
      '--legacy-peer-deps',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      `${packages[0]}@${version}`,
      packages[1],
    ]);
    const versions: Record<string, string> = {};
    for (const name of packages) {
      const manifest = JSON.parse(
        await readFile(join(dir, 'node_modules', name, 'package.json'), 'utf8'),
      ) as { version: string };
      versions[name] = manifest.version;
    }
    return { dir, versions };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}
