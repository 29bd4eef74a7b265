import { mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IdempotencyKeyRing } from '../../src/privacy/idempotency-key-ring.js';
import { runCli } from '../../src/cli/idempotency.cli.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { until } from '../utils/barrier.js';
import { lockWaiters } from '../utils/sessions.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';

/**
 * The command line (`npx nestjs-idempotency`) against the sample app's
 * database while the sample runs as a process: what an operator sees of a
 * completed and a running request, a stuck key reset (its handler fenced
 * out, the retry resuming once), a scope forgotten.
 */
describe('the command line, on the sample app’s database', () => {
  let db: TestDatabase;
  let gateway: FakeGateway;
  let app: SampleProcess;

  beforeAll(async () => {
    db = await createTestDatabase();
    gateway = await new FakeGateway().start();
    app = await startSample({ DATABASE_URL: db.url, GATEWAY_URL: gateway.url });
  });
  afterAll(async () => {
    await app?.stop();
    await gateway?.stop();
    await db?.drop();
  });

  /** Runs the command line; its exit code and what it wrote. */
  const cli = async (...args: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli(args, {
      out: (text) => (out += text),
      err: (text) => (err += text),
      env: { DATABASE_URL: db.url },
    });
    return { code, out, err };
  };
  const json = async <T = Record<string, unknown>>(...args: string[]) => {
    const { code, out, err } = await cli(...args, '--json');
    expect({ code, err }).toEqual({ code: 0, err: '' });
    return JSON.parse(out) as T;
  };
  const pay = (key: string) =>
    fetch(`${app.url}/payments`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
      body: JSON.stringify({ amount: 990, currency: 'EUR', merchantId: 'm_1' }),
    });
  const count = async (sql: string) =>
    (await db.query<{ n: number }>(sql))[0].n;

  it('inspects a completed key: status, fingerprint, response, and its body on request', async () => {
    const response = await pay('cli-done');
    const body = await response.text();
    expect(response.status).toBe(201);

    const record = await json('inspect', 'cli-done');
    expect(record).toMatchObject({
      scope: 'global',
      key: 'cli-done',
      status: 'completed',
      method: 'POST',
      fingerprint: expect.stringMatching(/[0-9a-f]{64}$/),
      response: {
        status: 201,
        headers: { 'content-type': 'application/json; charset=utf-8' },
      },
      steps: [],
    });
    expect(record).not.toHaveProperty('owner');
    expect(record.response).not.toHaveProperty('body');
    const withBody = await json<{ response: { body: string } }>(
      'inspect',
      'cli-done',
      '--body',
    );
    expect(Buffer.from(withBody.response.body, 'base64').toString()).toBe(body);

    const text = await cli('inspect', 'cli-done', '--scope', 'global');
    expect(text.code).toBe(0);
    expect(text.out).toContain('status: completed\n');
    expect(text.out).toContain('response status: 201\n');
  });

  it('inspects and lists a running key, refuses to reset it under a live lease, and, forced, fences its handler out: the retry resumes once', async () => {
    const payments = await count(`SELECT count(*)::int AS n FROM payments`);
    const holder = await holdInTransaction(
      db.url,
      'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
    );
    const held = pay('cli-stuck');
    await until(
      async () =>
        (await count(`SELECT count(*)::int AS n FROM idempotency_steps`)) === 1,
      'the charge step to commit',
    );
    await until(
      async () => (await lockWaiters(db, 'payments')).length === 1,
      'the handler to wait on the payments table',
    );

    const running = await json<{
      status: string;
      owner: string;
      leaseMs: number;
      generation: string;
      steps: Array<{ step: string; createdAt: string }>;
    }>('inspect', 'cli-stuck');
    expect(running).toMatchObject({
      status: 'in_progress',
      owner: expect.stringMatching(/^[0-9a-f-]{36}$/),
      bound: true,
      generation: expect.any(String),
    });
    expect(running.leaseMs).toBeGreaterThan(0);
    expect(running.steps.map((step) => step.step)).toHaveLength(1);
    expect(Date.parse(running.steps[0].createdAt)).not.toBeNaN();

    const page = await json<{
      records: Array<{ key: string; status: string }>;
    }>('list');
    expect(page.records).toEqual([
      expect.objectContaining({ key: 'cli-stuck', status: 'in_progress' }),
    ]);
    const listed = await cli('list');
    expect(listed.out).toMatch(/^in_progress\tglobal\tcli-stuck\t/);

    const refused = await cli('reset', 'cli-stuck');
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      /^nestjs-idempotency: Key "cli-stuck" in scope "global" is being executed: its owner's lease runs \d+ ms more\./,
    );

    expect(await json('reset', 'cli-stuck', '--force')).toEqual({
      scope: 'global',
      key: 'cli-stuck',
      reset: true,
      fenced: true,
    });
    await holder.release();
    // The old owner's completion found no claim of its own: rolled back.
    expect((await held).status).toBe(503);
    expect(await count(`SELECT count(*)::int AS n FROM payments`)).toBe(
      payments,
    );

    const retry = await pay('cli-stuck');
    expect(retry.status).toBe(201);
    expect(await count(`SELECT count(*)::int AS n FROM payments`)).toBe(
      payments + 1,
    );
    // Resumed after its charge, under the same derived key: charged once.
    expect(gateway.chargeCount).toBe(2);
    expect((await json('inspect', 'cli-stuck')).status).toBe('completed');
  });

  it('forgets a scope: every record and step gone, other scopes kept', async () => {
    await db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path, status, expires_at)
       VALUES ('other', 'kept', 'fp', 'POST', '/x', 'completed', now() + interval '1 hour')`,
    );
    const forgotten = await json<{ records: number; steps: number }>(
      'forget',
      '--scope',
      'global',
      '--batch-size',
      '1',
    );
    expect(forgotten).toEqual({
      scope: 'global',
      records: 2,
      steps: expect.any(Number),
    });
    expect(
      await count(
        `SELECT count(*)::int AS n FROM idempotency_records WHERE scope = 'global'`,
      ),
    ).toBe(0);
    expect(
      await count(
        `SELECT count(*)::int AS n FROM idempotency_steps WHERE scope = 'global'`,
      ),
    ).toBe(0);
    expect((await json('inspect', 'kept', '--scope', 'other')).status).toBe(
      'completed',
    );
    expect((await cli('forget', '--scope', 'other', '--key', 'kept')).out).toBe(
      'Forgot 1 records and 0 steps of scope "other", key "kept".\n',
    );
    expect(await json('gc')).toEqual({ removed: 0, abandoned: [] });
  });

  it('refuses an option or an argument its command does not take, and changes nothing: `forget <key>` never forgets the whole scope', async () => {
    await db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path, status, expires_at)
       VALUES ('tenant-x', 'one', 'fp', 'POST', '/x', 'completed', now() + interval '1 hour'),
              ('tenant-x', 'two', 'fp', 'POST', '/x', 'completed', now() + interval '1 hour')`,
    );
    const usage =
      'Run `nestjs-idempotency --help` for the commands and options.\n';
    expect(await cli('forget', 'one', '--scope', 'tenant-x')).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: forget takes no argument, not "one" (one key: --key <key>).\n${usage}`,
    });
    expect(
      await cli('inspect', 'one', '--scope', 'tenant-x', '--force'),
    ).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: inspect does not take --force.\n${usage}`,
    });
    for (const args of [
      ['reset', 'one', '--scope', 'tenant-x', '--key', 'two'],
      ['gc', '--scope', 'tenant-x'],
      ['list', 'one'],
      ['sql', '--scope', 'tenant-x'],
    ]) {
      const refused = await cli(...args);
      expect({ args, code: refused.code, out: refused.out }).toEqual({
        args,
        code: 2,
        out: '',
      });
    }
    expect(
      await db.query(
        `SELECT key, status FROM idempotency_records WHERE scope = 'tenant-x' ORDER BY key`,
      ),
    ).toEqual([
      { key: 'one', status: 'completed' },
      { key: 'two', status: 'completed' },
    ]);
    await db.query(`DELETE FROM idempotency_records WHERE scope = 'tenant-x'`);
  });

  it('prints the schema as the migrations’ SQL files, in order', async () => {
    const folder = new URL('../../migrations/sql/', import.meta.url);
    const names = (await readdir(folder)).filter((n) => n.endsWith('.sql'));
    const files = await Promise.all(
      names.sort().map((name) => readFile(new URL(name, folder), 'utf8')),
    );
    const { code, out } = await cli('sql');
    expect(code).toBe(0);
    expect(out).toBe(files.join('\n'));
    expect(out).toContain('CREATE TABLE "idempotency_records"');
  });

  it('refuses bad input with a message and a non-zero exit', async () => {
    expect(await cli('inspect', 'no-such-key')).toEqual({
      code: 1,
      out: '',
      err: 'nestjs-idempotency: No idempotency record holds key "no-such-key" in scope "global".\n',
    });
    const usage =
      'Run `nestjs-idempotency --help` for the commands and options.\n';
    expect(await cli('frobnicate')).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: Unknown command "frobnicate".\n${usage}`,
    });
    expect((await cli('list', '--limit', 'many')).err).toBe(
      `nestjs-idempotency: --limit must be a whole number, not "many".\n${usage}`,
    );
    // A value that begins with a dash is the option's, refused as such.
    expect(await cli('list', '--limit', '-1')).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: --limit must be a whole number, not "-1".\n${usage}`,
    });
    expect((await cli('gc', '--batch-size', '-5')).err).toBe(
      `nestjs-idempotency: --batch-size must be a whole number, not "-5".\n${usage}`,
    );
    // A key ring that cannot be read, or is wrongly shaped, is the
    // operator's input too; and reencrypt has nothing to do without one.
    const keys = await mkdtemp(join(tmpdir(), 'cli-keys-'));
    const notJson = join(keys, 'not-json.json');
    await writeFile(notJson, '{', { mode: 0o600 });
    const empty = join(keys, 'empty.json');
    await writeFile(empty, '', { mode: 0o600 });
    const shortKey = join(keys, 'short.json');
    await writeFile(
      shortKey,
      JSON.stringify({
        keys: { k1: Buffer.alloc(16).toString('base64') },
        current: 'k1',
      }),
      { mode: 0o600 },
    );
    // Bad values of options are usage errors too, refused before the store
    // is asked anything: `gc` never loops on a batch of no row.
    for (const args of [
      ['list', '--keys', join(keys, 'missing.json')],
      ['list', '--keys', notJson],
      ['list', '--keys', empty],
      ['reencrypt', '--keys', empty],
      ['list', '--keys', shortKey],
      ['reencrypt'],
      ['list', '--status', 'stuck'],
      ['list', '--limit', '0'],
      ['list', '--limit', '5000'],
      ['list', '--cursor', 'garbage'],
      ['forget', '--scope', ''],
      ['forget', '--scope', 'x', '--batch-size', '0'],
      ['gc', '--batch-size', '0'],
      ['gc', '--batch-size', '20000'],
      // A Redis option with a PostgreSQL URL: refused, never ignored.
      ['list', '--prefix', 'app:'],
    ]) {
      const refused = await cli(...args);
      expect({
        args,
        code: refused.code,
        usage: refused.err.endsWith(usage),
      }).toEqual({
        args,
        code: 2,
        usage: true,
      });
    }
    // An empty key file named is refused, never read as no ring given.
    expect(await cli('inspect', 'no-such-key', '--keys', empty)).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: The key ring file ${empty} is empty: give { "keys": { "<id>": "<base64>" }, "current": "<id>" }.\n${usage}`,
    });
    // A NUL character, which PostgreSQL refuses in text, is refused before
    // the database is asked: in a cursor, a key or a scope.
    const nulCursor = Buffer.from(JSON.stringify(['\u0000', 'x'])).toString(
      'base64url',
    );
    expect(await cli('list', '--cursor', nulCursor)).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: The cursor "${nulCursor}" is not one that a page of records returned.\n${usage}`,
    });
    for (const [args, what] of [
      [['inspect', 'a\u0000b'], 'key'],
      [['reset', 'a\u0000b', '--force'], 'key'],
      [['list', '--scope', 'a\u0000b'], 'scope'],
      [['forget', '--scope', 'a\u0000b'], 'scope'],
      [['forget', '--scope', 'global', '--key', 'a\u0000b'], 'key'],
    ] as const) {
      expect({ args, ...(await cli(...args)) }).toEqual({
        args,
        code: 2,
        out: '',
        err: `nestjs-idempotency: The ${what} must not hold a NUL character (\\u0000).\n${usage}`,
      });
    }
    // A lone surrogate, which PostgreSQL's driver writes as U+FFFD, is
    // refused too: it would name the record of the scope or key with
    // U+FFFD in its place, which inspect showed and forget deleted.
    await db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path, status, response_status, response_headers, response_body, expires_at)
       VALUES ('tenant-\uFFFD', 'key-\uFFFD', 'f', 'POST', '/x', 'completed', 201, '{}', 'kept', now() + interval '1 hour')`,
    );
    const loneCursor = Buffer.from(
      JSON.stringify(['tenant-\uD800', 'x']),
    ).toString('base64url');
    expect(await cli('list', '--cursor', loneCursor)).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: The cursor "${loneCursor}" is not one that a page of records returned.\n${usage}`,
    });
    for (const [args, what] of [
      [['inspect', 'key-\uD800', '--scope', 'tenant-\uFFFD'], 'key'],
      [['reset', 'key-\uFFFD', '--scope', 'tenant-\uDC00'], 'scope'],
      [['list', '--scope', 'tenant-\uD800', '--status', 'completed'], 'scope'],
      [['forget', '--scope', 'tenant-\uD800'], 'scope'],
      [['forget', '--scope', 'tenant-\uFFFD', '--key', 'key-\uDFFF'], 'key'],
    ] as const) {
      expect({ args, ...(await cli(...args)) }).toEqual({
        args,
        code: 2,
        out: '',
        err: `nestjs-idempotency: The ${what} must be well-formed Unicode, without a lone surrogate.\n${usage}`,
      });
    }
    expect(
      await count(
        `SELECT count(*)::int AS n FROM idempotency_records WHERE scope = 'tenant-\uFFFD'`,
      ),
    ).toBe(1);
    await db.query(
      `DELETE FROM idempotency_records WHERE scope = 'tenant-\uFFFD'`,
    );
    expect((await cli('forget')).code).toBe(2);
    expect((await cli('inspect')).code).toBe(2);
    expect((await cli('list', '--nope')).code).toBe(2);
    const noUrl = await runCli(['list'], {
      out: () => undefined,
      err: (text) => expect(text).toMatch(/DATABASE_URL|--help/),
      env: {},
    });
    expect(noUrl).toBe(2);
    expect(await cli('list', '--url', 'mysql://root:p@ss@127.0.0.1/x')).toEqual(
      {
        code: 2,
        out: '',
        // The password, `@` and all, is never printed.
        err: `nestjs-idempotency: The URL "mysql://root:***@127.0.0.1/x" is neither a PostgreSQL URL (postgres://…) nor a Redis one (redis://…).\n${usage}`,
      },
    );
    const help = await cli('--help');
    expect(help.code).toBe(0);
    expect(help.out).toMatch(/^Usage: nestjs-idempotency <command>/);
  });

  it('lists every scope without --scope and inspects in the global scope, as its help says', async () => {
    await db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path, status, response_status, response_headers, response_body, expires_at)
       VALUES ('help-a', 'k', 'f', 'POST', '/x', 'failed', 500, '{}', 'a', now() + interval '1 hour'),
              ('help-b', 'k', 'f', 'POST', '/x', 'failed', 500, '{}', 'b', now() + interval '1 hour')`,
    );
    const page = await json<{ records: Array<{ scope: string }> }>(
      'list',
      '--status',
      'failed',
    );
    expect(
      page.records
        .map((record) => record.scope)
        .filter((scope) => scope.startsWith('help-')),
    ).toEqual(['help-a', 'help-b']);
    expect((await cli('inspect', 'k')).code).toBe(1);

    const { out } = await cli('--help');
    expect(out).toContain(
      "--scope <scope>     inspect, reset: the key's scope (default: global);\n" +
        '                      list, reencrypt: only this scope (default: every scope);\n' +
        '                      forget: the scope to forget (needed)\n',
    );
    expect(out).toContain(
      'reencrypt: records per page (default 100, at most 1000)',
    );
    await db.query(
      `DELETE FROM idempotency_records WHERE scope IN ('help-a', 'help-b')`,
    );
  });

  it('gc reports the abandoned steps it deletes opened with the key ring, as the application would: this run is the last to see them', async () => {
    const ring = {
      keys: { k1: Buffer.alloc(32, 7).toString('base64') },
      current: 'k1',
    };
    const sealing = new IdempotencyKeyRing(ring);
    const abandon = (key: string) =>
      db.query(
        `INSERT INTO idempotency_steps (scope, key, step, result, expires_at)
         VALUES ('global', $1, 'charge', $2::jsonb, now() - interval '1 minute')`,
        [
          key,
          JSON.stringify(
            sealing.sealStep('global', key, 'charge', { chargeId: 'ch_1' }),
          ),
        ],
      );
    const file = join(await mkdtemp(join(tmpdir(), 'cli-ring-')), 'ring.json');
    await writeFile(file, JSON.stringify(ring), { mode: 0o600 });

    await abandon('cli-sealed-1');
    expect(await json('gc', '--keys', file)).toEqual({
      removed: 1,
      abandoned: [
        {
          scope: 'global',
          key: 'cli-sealed-1',
          steps: [{ step: 'charge', result: { chargeId: 'ch_1' } }],
        },
      ],
    });

    // Without the ring: shown sealed, and the operator told how to read them.
    await abandon('cli-sealed-2');
    const blind = await cli('gc');
    expect(blind.code).toBe(0);
    expect(blind.out).toMatch(
      /^abandoned: global\tcli-sealed-2\t\[\{"step":"charge","result":"idempotency-sealed:/,
    );
    expect(blind.out).toContain(
      'Some abandoned steps are sealed: run gc with the key ring (--keys <file>, or IDEMPOTENCY_KEYS) to read them.',
    );
  });

  it('gc that fails after a batch committed prints the abandoned steps that batch deleted, and exits 1', async () => {
    await db.query(
      `INSERT INTO idempotency_steps (scope, key, step, result, expires_at) VALUES
         ('global', 'cli-gone-1', 'charge', '{"id":"ch_9"}', now() - interval '2 minutes'),
         ('global', 'cli-poison', 'charge', '{"id":"ch_10"}', now() - interval '1 minute')`,
    );
    // The second batch (the later step) fails, as a lost connection would.
    await db.query(`
      CREATE FUNCTION cli_poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.key = 'cli-poison' THEN
          RAISE EXCEPTION 'the connection was lost';
        END IF;
        RETURN OLD;
      END $$`);
    await db.query(`
      CREATE TRIGGER cli_poison AFTER DELETE ON idempotency_steps
      FOR EACH ROW EXECUTE FUNCTION cli_poison()`);
    try {
      const { code, out, err } = await cli('gc', '--batch-size', '1', '--json');
      expect({ code, err }).toEqual({ code: 1, err: '' });
      expect(JSON.parse(out)).toEqual({
        removed: 1,
        abandoned: [
          {
            scope: 'global',
            key: 'cli-gone-1',
            steps: [{ step: 'charge', result: { id: 'ch_9' } }],
          },
        ],
        error: 'the connection was lost',
      });
      expect(
        await db.query(`SELECT key FROM idempotency_steps ORDER BY key`),
      ).toEqual([{ key: 'cli-poison' }]);
    } finally {
      await db.query(`DROP TRIGGER cli_poison ON idempotency_steps`);
      await db.query(`DROP FUNCTION cli_poison()`);
      await db.query(`DELETE FROM idempotency_steps`);
    }
  });
});
