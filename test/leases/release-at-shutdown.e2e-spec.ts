/**
 * A key whose release failed just before its instance shut down: the
 * instance tries the release once more as it shuts down, so the key is free
 * at once, not a lease later. Retries of a failed release come every 500 ms
 * while the instance runs; one that comes only at shutdown used to be
 * dropped. PostgreSQL without a presence session (which would free the key
 * as the instance goes), over real HTTP.
 *
 * The release fails as a server refuses it: its function is renamed away
 * (42883) until the shutdown begins, when the test module's
 * `onModuleDestroy` (which Nest runs before any shutdown hook) puts it back.
 */
import { randomUUID } from 'node:crypto';
import {
  Controller,
  Inject,
  Injectable,
  Module,
  Post,
  type OnModuleDestroy,
} from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import type { TestDatabase } from '../utils/test-database.js';

/** The release's function, and the name it is hidden under meanwhile. */
const RELEASE = 'idempotency_release';
const HIDDEN = 'idempotency_release_hidden_by_test';

/**
 * Renames every function called `from` (whatever its arguments) to `to`:
 * how many.
 */
async function renameFunctions(db: TestDatabase, from: string, to: string) {
  const functions = await db.query<{ signature: string }>(
    `SELECT oid::regprocedure::text AS signature FROM pg_proc WHERE proname = $1`,
    [from],
  );
  for (const { signature } of functions) {
    await db.query(`ALTER FUNCTION ${signature} RENAME TO ${to}`);
  }
  return functions.length;
}

@Injectable()
class Shutdown implements OnModuleDestroy {
  /** Where the handler waits until the test lets it fail. */
  readonly held = new Barrier();
  /** The database whose release function comes back as the shutdown begins. */
  db: TestDatabase | undefined;
  /** How many functions came back. */
  restored = 0;

  async onModuleDestroy(): Promise<void> {
    if (this.db) {
      this.restored = await renameFunctions(this.db, HIDDEN, RELEASE);
    }
  }
}

@Controller('release-at-shutdown')
class ReleaseController {
  constructor(@Inject(Shutdown) private readonly shutdown: Shutdown) {}

  @Post()
  @Idempotent()
  async fail(): Promise<never> {
    await this.shutdown.held.wait();
    throw new Error('the handler failed: its claim is released');
  }
}

@Module({ controllers: [ReleaseController], providers: [Shutdown] })
class ReleaseAtShutdownModule {}

describe.each(PLATFORMS)(
  'a release that failed just before the instance shut down (%s)',
  (platform) => {
    let target: TestApp;
    let closed = false;

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [ReleaseAtShutdownModule],
        idempotency: { gc: false, presence: false },
      });
    });
    afterAll(async () => {
      const shutdown = target?.app.get(Shutdown);
      shutdown?.held.open();
      if (target && !closed) {
        await target.app.close();
      }
      await target?.db.drop();
    });

    const record = (key: string) =>
      target.db.query<{ status: string; owner: string | null }>(
        `SELECT status, owner FROM idempotency_records WHERE key = $1`,
        [key],
      );

    it('is tried again as the instance shuts down: the key is free at once, not a lease later', async () => {
      const shutdown = target.app.get(Shutdown);
      const key = randomUUID();
      const first = send(target, '/release-at-shutdown', { key });
      await shutdown.held.reached(1);
      // The claim is made; its release will be refused until the shutdown.
      expect(await record(key)).toEqual([
        { status: 'in_progress', owner: expect.any(String) as string },
      ]);
      // Each version of it (migrations add a new one beside the old).
      const hidden = await renameFunctions(target.db, RELEASE, HIDDEN);
      expect(hidden).toBeGreaterThan(0);
      shutdown.db = target.db;
      shutdown.held.open();
      expect((await first).status).toBe(500);
      // Its release failed, and its retries fail: the key stays claimed
      // (for the claim's lease, 15 s).
      expect(await record(key)).toEqual([
        { status: 'in_progress', owner: expect.any(String) as string },
      ]);

      await target.app.close();
      closed = true;
      expect(shutdown.restored).toBe(hidden);
      // Released as the instance shut down: no record is left.
      expect(await record(key)).toEqual([]);
    });
  },
);
