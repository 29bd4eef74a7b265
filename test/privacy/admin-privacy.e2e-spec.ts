import { randomBytes } from 'node:crypto';
import { Controller, Post } from '@nestjs/common';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../src/cli/idempotency.cli.js';
import {
  IdempotencyAdmin,
  IdempotencyPrivacy,
  IdempotencyStore,
  Idempotent,
  MemoryIdempotencyStore,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { startStoreApp } from '../utils/store-app.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';
import { PrivacyController, PrivacyRuns, SECRETS } from './privacy.module.js';

const OLD_KEY = randomBytes(32);
const NEW_KEY = randomBytes(32);

/** A response too large to store: its record keeps its status alone. */
@Controller('not-stored')
class NotStoredController {
  @Post()
  @Idempotent({ maxResponseSize: 10 })
  create() {
    return { data: 'x'.repeat(100) };
  }
}

describe('IdempotencyAdmin.inspect of a record encrypted at rest (PostgreSQL)', () => {
  let target: TestApp;
  let store: IdempotencyStore;
  let replayed: { headers: Headers; body: Buffer };

  beforeAll(async () => {
    target = await startTestApp({
      idempotency: {
        gc: false,
        encryption: { keys: { old: OLD_KEY }, current: 'old' },
      },
      controllers: [PrivacyController, NotStoredController],
      providers: [PrivacyRuns],
    });
    store = target.app.get<IdempotencyStore>(IdempotencyStore);
    expect(
      (await send(target, '/privacy/card', { key: 'inspect-1' })).status,
    ).toBe(201);
    const replay = await send(target, '/privacy/card', { key: 'inspect-1' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    replayed = {
      headers: replay.headers,
      body: Buffer.from(await replay.arrayBuffer()),
    };
  });
  afterAll(() => target?.close());

  it("gives the opened headers and body with the module's key ring, as a duplicate gets them", async () => {
    const admin = target.app.get(IdempotencyAdmin);
    const record = await admin.inspect('inspect-1', 'global', { body: true });
    expect(record.status).toBe('completed');
    expect(record.response).toEqual({
      status: 201,
      headers: expect.objectContaining({
        'x-account': SECRETS.header,
      }) as unknown,
      body: replayed.body,
      keyId: 'old',
    });
    expect(record.response?.body?.toString()).toContain(SECRETS.card);
    expect(replayed.headers.get('x-account')).toBe(SECRETS.header);

    const withoutBody = await admin.inspect('inspect-1');
    expect(withoutBody.response).toEqual({
      status: 201,
      headers: record.response?.headers,
      keyId: 'old',
    });
  });

  it('says it cannot be opened, with neither headers nor sealed bytes, when its key is not in the ring or no ring is given', async () => {
    const foreign = new IdempotencyAdmin(
      store,
      IdempotencyPrivacy.withKeys({ keys: { new: NEW_KEY }, current: 'new' }),
    );
    expect(
      (await foreign.inspect('inspect-1', 'global', { body: true })).response,
    ).toEqual({
      status: 201,
      keyId: 'old',
      unreadable: 'it was sealed with key "old", not in the key ring',
    });

    const withoutRing = new IdempotencyAdmin(store);
    expect(
      (await withoutRing.inspect('inspect-1', 'global', { body: true }))
        .response,
    ).toEqual({
      status: 201,
      keyId: 'old',
      unreadable:
        'it is sealed with key "old", and no key ring was given to open it',
    });
  });

  it('shows the status of a record not replayable as its duplicates get it, never as a response it cannot open', async () => {
    expect(
      (await send(target, '/not-stored', { key: 'not-stored-1' })).status,
    ).toBe(201);
    const duplicate = await send(target, '/not-stored', {
      key: 'not-stored-1',
    });
    expect(duplicate.status).toBe(201);
    expect(duplicate.headers.get('idempotent-body-omitted')).toBe('true');

    const admin = target.app.get(IdempotencyAdmin);
    const record = await admin.inspect('not-stored-1', 'global', {
      body: true,
    });
    expect(record.status).toBe('not_replayable');
    expect(record.response).toEqual({
      status: 201,
      headers: {},
      body: Buffer.alloc(0),
    });
    let out = '';
    expect(
      await runCli(['inspect', 'not-stored-1'], {
        out: (text) => (out += text),
        err: () => undefined,
        env: {
          DATABASE_URL: target.db.url,
          IDEMPOTENCY_KEYS: ringJson({ old: OLD_KEY }, 'old'),
        },
      }),
    ).toBe(0);
    expect(out).toContain('response status: 201\n');
    expect(out).not.toContain('cannot be opened');
  });
});

/** The ring as the command line reads it: JSON, keys in base64. */
const ringJson = (keys: Record<string, Buffer>, current: string) =>
  JSON.stringify({
    keys: Object.fromEntries(
      Object.entries(keys).map(([id, key]) => [id, key.toString('base64')]),
    ),
    current,
  });

const sealedWith = (keys: Record<string, Buffer>, current: string) =>
  ({
    gc: false,
    encryption: { keys, current },
  }) satisfies IdempotencyModuleOptions;

/** The key id each stored body names, by key. */
async function keyIds(target: TestApp): Promise<Record<string, string>> {
  const rows = await target.db.query<{ key: string; body: Buffer }>(
    `SELECT key, response_body AS body FROM ${IDEMPOTENCY_TABLE_NAME} ORDER BY key`,
  );
  return Object.fromEntries(
    rows.map(({ key, body }) => [
      key,
      body.subarray(5, 5 + body[4]).toString(),
    ]),
  );
}

describe('key rotation from the command line: nestjs-idempotency reencrypt (PostgreSQL)', () => {
  const KEYS = ['rot-1', 'rot-2', 'rot-3'];
  let before: TestApp;
  let dir: string;
  const first = new Map<string, { body: Buffer; account: string | null }>();

  beforeAll(async () => {
    before = await startTestApp({
      idempotency: sealedWith({ old: OLD_KEY }, 'old'),
      controllers: [PrivacyController],
      providers: [PrivacyRuns],
    });
    dir = await mkdtemp(join(tmpdir(), 'idempotency-keys-'));
    for (const key of KEYS) {
      const answer = await send(before, '/privacy/card', { key });
      expect(answer.status).toBe(201);
      first.set(key, {
        body: Buffer.from(await answer.arrayBuffer()),
        account: answer.headers.get('x-account'),
      });
    }
  });
  afterAll(async () => {
    await before?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const cli = async (args: string[], env: NodeJS.ProcessEnv = {}) => {
    let out = '';
    let err = '';
    const code = await runCli(args, {
      out: (text) => (out += text),
      err: (text) => (err += text),
      env: { DATABASE_URL: before.db.url, ...env },
    });
    return { code, out, err };
  };

  it('reseals every record with the current key from a key file; replays stay byte-exact once the old key left the ring', async () => {
    expect(await keyIds(before)).toEqual({
      'rot-1': 'old',
      'rot-2': 'old',
      'rot-3': 'old',
    });
    const file = join(dir, 'ring.json');
    await writeFile(file, ringJson({ old: OLD_KEY, new: NEW_KEY }, 'new'), {
      mode: 0o600,
    });
    const run = await cli([
      'reencrypt',
      '--keys',
      file,
      '--batch-size',
      '2',
      '--json',
    ]);
    expect({ code: run.code, err: run.err }).toEqual({ code: 0, err: '' });
    expect(JSON.parse(run.out)).toEqual({
      resealed: 3,
      current: 0,
      changed: 0,
      unreadable: [],
      steps: { resealed: 0, current: 0, changed: 0 },
    });
    expect(await keyIds(before)).toEqual({
      'rot-1': 'new',
      'rot-2': 'new',
      'rot-3': 'new',
    });

    // The ring in the environment instead: nothing left to reseal.
    const again = await cli(['reencrypt'], {
      IDEMPOTENCY_KEYS: ringJson({ old: OLD_KEY, new: NEW_KEY }, 'new'),
    });
    expect(again).toMatchObject({ code: 0, err: '' });
    expect(again.out).toContain(
      'Resealed 0 records with the current key; 3 already were',
    );

    const after = await startTestApp({
      database: before.db,
      idempotency: sealedWith({ new: NEW_KEY }, 'new'),
      controllers: [PrivacyController],
      providers: [PrivacyRuns],
    });
    try {
      for (const key of KEYS) {
        const replay = await send(after, '/privacy/card', { key });
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.headers.get('x-account')).toBe(first.get(key)?.account);
        expect(Buffer.from(await replay.arrayBuffer())).toEqual(
          first.get(key)?.body,
        );
      }
      expect(after.app.get(PrivacyRuns).card).toBe(0);
    } finally {
      await after.close();
    }
  });

  it('fails closed: a record it cannot open is named and the exit code is 1; no ring is a usage error (2)', async () => {
    const foreign = await cli(['reencrypt'], {
      IDEMPOTENCY_KEYS: ringJson({ other: randomBytes(32) }, 'other'),
    });
    expect(foreign.code).toBe(1);
    expect(foreign.out).toContain(
      'cannot be opened: global\trot-1\tit was sealed with key "new", not in the key ring',
    );
    expect(await keyIds(before)).toEqual({
      'rot-1': 'new',
      'rot-2': 'new',
      'rot-3': 'new',
    });

    // No ring, or one that cannot be read: the operator's input, refused
    // as a usage error before the store is asked anything.
    const none = await cli(['reencrypt']);
    expect(none.code).toBe(2);
    expect(none.err).toContain(
      'reencrypt needs the key ring: pass --keys <file>, or set IDEMPOTENCY_KEYS.',
    );

    const notJson = await cli(['reencrypt'], { IDEMPOTENCY_KEYS: 'not json' });
    expect(notJson.code).toBe(2);
    expect(notJson.err).toContain(
      'The key ring in IDEMPOTENCY_KEYS is not JSON',
    );

    // One sealed with the current key, but altered, is named too.
    const [{ body }] = await before.db.query<{ body: Buffer }>(
      `SELECT response_body AS body FROM idempotency_records WHERE key = 'rot-3'`,
    );
    const altered = Buffer.from(body);
    altered[altered.length - 1] ^= 1;
    const write = (value: Buffer) =>
      before.db.query(
        `UPDATE idempotency_records SET response_body = $1 WHERE key = 'rot-3'`,
        [value],
      );
    await write(altered);
    try {
      const run = await cli(['reencrypt'], {
        IDEMPOTENCY_KEYS: ringJson({ new: NEW_KEY }, 'new'),
      });
      expect(run.code).toBe(1);
      expect(run.out).toMatch(/^cannot be opened: global\trot-3\t/m);
      expect(run.out).toContain('2 already were');
    } finally {
      await write(body);
    }
  });

  it('writes back only a record unchanged since it was read (the store compares the stored body)', async () => {
    const store = before.app.get<IdempotencyStore>(IdempotencyStore);
    const read = await store.inspectRecord!('global', 'rot-1', true);
    const stale = Buffer.from(read!.response!.body!);
    stale[stale.length - 1] ^= 1;
    const next = { status: 201, headers: {}, body: Buffer.from('replaced') };
    expect(await store.replaceResponse!('global', 'rot-1', stale, next)).toBe(
      false,
    );
    expect(await store.replaceResponse!('global', 'absent', stale, next)).toBe(
      false,
    );
    // The same body in a record of another generation (completed again
    // since it was read, as a plaintext body may be): left alone.
    expect(
      await store.replaceResponse!(
        'global',
        'rot-1',
        read!.response!.body!,
        next,
        `${read!.generation}0`,
      ),
    ).toBe(false);
    const unchanged = await store.inspectRecord!('global', 'rot-1', true);
    expect(unchanged!.response!.body).toEqual(read!.response!.body);
  });

  it('reseals the steps of a claim whose request failed after them: once the old key left the ring, its retry resumes after the step instead of answering 503', async () => {
    const runs = before.app.get(PrivacyRuns);
    runs.failSteps = true;
    expect(
      (await send(before, '/privacy/steps', { key: 'rot-steps' })).status,
    ).toBe(500);
    const charges = runs.charges;
    const run = await cli(['reencrypt', '--json'], {
      IDEMPOTENCY_KEYS: ringJson({ old: OLD_KEY, new: NEW_KEY }, 'new'),
    });
    expect({ code: run.code, err: run.err }).toEqual({ code: 0, err: '' });
    expect(JSON.parse(run.out)).toMatchObject({
      unreadable: [],
      steps: { resealed: 1, current: 0, changed: 0 },
    });
    const after = await startTestApp({
      database: before.db,
      idempotency: sealedWith({ new: NEW_KEY }, 'new'),
      controllers: [PrivacyController],
      providers: [PrivacyRuns],
    });
    try {
      const retry = await send(after, '/privacy/steps', { key: 'rot-steps' });
      expect({ status: retry.status, body: await retry.json() }).toEqual({
        status: 201,
        body: { charge: { token: SECRETS.token } },
      });
      expect(runs.charges + after.app.get(PrivacyRuns).charges).toBe(charges);
    } finally {
      await after.close();
    }
  });
});

describe('IdempotencyAdmin.reencrypt on the memory store', () => {
  it('reseals with the current key, fenced by the stored body', async () => {
    const store = new MemoryIdempotencyStore();
    const target = await startStoreApp({
      store,
      idempotency: sealedWith({ old: OLD_KEY }, 'old'),
      controllers: [PrivacyController],
      providers: [PrivacyRuns],
    });
    try {
      const answer = await fetch(`${target.url}/privacy/card`, {
        method: 'POST',
        headers: { 'Idempotency-Key': 'mem-1' },
      });
      expect(answer.status).toBe(201);
      const body = Buffer.from(await answer.arrayBuffer());
      const rotated = IdempotencyPrivacy.withKeys({
        keys: { old: OLD_KEY, new: NEW_KEY },
        current: 'new',
      });
      const admin = new IdempotencyAdmin(store, rotated);
      // A request that failed after its step: its key stays bound to it.
      target.app.get(PrivacyRuns).failSteps = true;
      const failed = await fetch(`${target.url}/privacy/steps`, {
        method: 'POST',
        headers: { 'Idempotency-Key': 'mem-steps' },
      });
      expect(failed.status).toBe(500);
      const [sealedStep] = await store.readStepResults('global', 'mem-steps');
      expect(await admin.reencrypt()).toEqual({
        resealed: 1,
        current: 0,
        changed: 0,
        unreadable: [],
        steps: { resealed: 1, current: 0, changed: 0 },
      });
      const [resealedStep] = await store.readStepResults('global', 'mem-steps');
      expect(
        IdempotencyPrivacy.withKeys({
          keys: { new: NEW_KEY },
          current: 'new',
        }).openStep('global', 'mem-steps', 'charge', resealedStep.result),
      ).toEqual({ token: SECRETS.token });
      // Fenced by the result read: a stale one is left alone.
      expect(
        await store.replaceStepResult(
          'global',
          'mem-steps',
          'charge',
          sealedStep.result,
          sealedStep.result,
        ),
      ).toBe(false);
      const onlyNew = new IdempotencyAdmin(
        store,
        IdempotencyPrivacy.withKeys({ keys: { new: NEW_KEY }, current: 'new' }),
      );
      const record = await onlyNew.inspect('mem-1', 'global', { body: true });
      expect(record.response).toMatchObject({ keyId: 'new', body });
      const read = await store.inspectRecord('global', 'mem-1', true);
      expect(
        await store.replaceResponse(
          'global',
          'mem-1',
          Buffer.from('stale'),
          read!.response as never,
        ),
      ).toBe(false);
      expect(
        await store.replaceResponse(
          'global',
          'mem-1',
          read!.response!.body!,
          read!.response as never,
          `${read!.generation}0`,
        ),
      ).toBe(false);
    } finally {
      await target.close();
    }
  });
});
