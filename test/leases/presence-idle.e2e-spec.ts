import { until } from '../utils/barrier.js';
import {
  PRESENCE_APPLICATION_NAME,
  terminateBackend,
} from '../utils/sessions.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

/**
 * The presence session is idle between notifications by design: a server
 * (or a role, or a database) that ends idle sessions must not end it, or
 * the instance's presence drops again and again, and with it the
 * protection of its running requests from other instances.
 */
describe('the presence session where the database ends idle sessions', () => {
  let db: TestDatabase;
  let target: TestApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    target = await startTestApp({ database: db });
  });
  afterAll(async () => {
    await target?.close();
    await db?.drop();
  });

  const presencePids = async () =>
    (
      await db.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
          WHERE application_name = $1 AND datname = current_database()`,
        [PRESENCE_APPLICATION_NAME],
      )
    ).map((row) => row.pid);

  it('keeps its one session past the timeout: it turned the timeout off for itself', async () => {
    // Set for the sessions that start from now on (the app's pool, already
    // open, is left alone); the presence session is ended, and comes back
    // under it.
    const name = new URL(db.url).pathname.slice(1);
    await db.query(
      `ALTER DATABASE "${name}" SET idle_session_timeout = '200ms'`,
    );
    const [ended] = await presencePids();
    await terminateBackend(db, ended);
    await until(async () => {
      const pids = await presencePids();
      return pids.length === 1 && pids[0] !== ended;
    }, 'the presence session to come back');
    const before = await presencePids();
    // Time passing is the subject: five times the server's idle timeout.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await presencePids()).toEqual(before);
  });
});
