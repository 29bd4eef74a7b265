import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { assertBuilt } from '../utils/library-build.js';

/*
 * The compiled `nestjs-idempotency/drizzle` entry in a process of its own
 * whose module resolution hooks (test/utils/hidden-packages.js) log every
 * import of drizzle-orm, and can make it unresolvable as if it were not
 * installed: drizzle-orm is an optional peer, loaded by the adapter only.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));

describe('the nestjs-idempotency/drizzle entry', () => {
  let scratch: string;

  beforeAll(async () => {
    await assertBuilt();
    scratch = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-drizzle-'));
  });
  afterAll(async () => {
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  /** What the app printed, with drizzle-orm hidden or not. */
  async function start(hide: boolean): Promise<string[]> {
    const log = join(scratch, `${String(hide)}.log`);
    await writeFile(log, '');
    const { stdout } = await run(
      process.execPath,
      [join(root, 'test/utils/hidden-packages.js')],
      {
        cwd: root,
        env: {
          PATH: process.env.PATH,
          HIDE: hide ? '1' : '0',
          PEER_LOG: log,
          HIDDEN_PACKAGES: '^drizzle-orm(/|$)',
          HIDDEN_APP: 'test/adapters/drizzle-peerless-app.js',
        },
      },
    );
    return stdout.trim().split('\n');
  }

  it('loads nothing of drizzle-orm until the adapter is made, which refuses without it', async () => {
    expect(await start(true)).toEqual([
      'imported: ',
      'refused: DrizzleIdempotencyAdapter needs drizzle-orm, which is not installed.',
    ]);
  });

  it('makes the adapter with drizzle-orm installed', async () => {
    expect(await start(false)).toEqual(['imported: ', 'created']);
  });
});
