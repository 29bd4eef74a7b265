import { randomBytes } from 'node:crypto';
import {
  IdempotencyAdmin,
  IdempotencyCollector,
  IdempotencyPrivacy,
  type IdempotencyEvent,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { answer, UNAVAILABLE_ANSWER } from '../utils/problems.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { PrivacyController, PrivacyRuns, SECRETS } from './privacy.module.js';

const OLD_KEY = randomBytes(32);
const NEW_KEY = randomBytes(32);

/** Every form a secret could take in a dump: as text, hex (bytea) or base64. */
function forms(secret: string): string[] {
  const bytes = Buffer.from(secret);
  return [secret, bytes.toString('hex'), bytes.toString('base64').slice(0, 12)];
}

/** `SELECT *` of the records and steps tables, each row as JSON text. */
async function dump(target: TestApp): Promise<string> {
  const rows = await target.db.query<{ row: string }>(
    `SELECT row_to_json(r)::text AS row FROM ${IDEMPOTENCY_TABLE_NAME} r
     UNION ALL SELECT row_to_json(s)::text FROM idempotency_steps s`,
  );
  return rows.map(({ row }) => row).join('\n');
}

function expectNoSecret(text: string): void {
  for (const secret of Object.values(SECRETS)) {
    for (const form of forms(secret)) {
      expect(text).not.toContain(form);
    }
  }
}

async function storedBody(target: TestApp, key: string): Promise<Buffer> {
  return (await storedResponse(target, key)).stored.body;
}

/** The stored response of `key`, as the store holds it (sealed). */
async function storedResponse(target: TestApp, key: string) {
  const [row] = await target.db.query<{
    scope: string;
    response_status: number;
    response_headers: Record<string, string>;
    response_body: Buffer;
  }>(
    `SELECT scope, response_status, response_headers, response_body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
    [key],
  );
  return {
    scope: row.scope,
    stored: {
      status: row.response_status,
      headers: row.response_headers,
      body: row.response_body,
    },
  };
}

/** The key id a sealed body names (`IDS1`, its length, the id). */
function keyIdOf(sealed: Buffer): string {
  expect(sealed.subarray(0, 4).toString()).toBe('IDS1');
  return sealed.subarray(5, 5 + sealed[4]).toString();
}

const encrypted = (
  keys: Record<string, Buffer>,
  current: string,
): IdempotencyModuleOptions => ({
  gc: false,
  encryption: { keys, current },
});

/**
 * Turning encryption on, with records stored before: one database, an
 * instance without encryption, one with it (strict), one with
 * `readPlaintext` (as deployed while the old records are resealed or
 * expire).
 */
describe('encryption turned on over records stored in plaintext', () => {
  let plain: TestApp;
  let strict: TestApp;
  let migrating: TestApp;

  beforeAll(async () => {
    const app = (idempotency: IdempotencyModuleOptions, from?: TestApp) =>
      startTestApp({
        ...(from ? { database: from.db } : {}),
        idempotency,
        controllers: [PrivacyController],
        providers: [PrivacyRuns],
      });
    plain = await app({ gc: false });
    strict = await app(encrypted({ old: OLD_KEY }, 'old'), plain);
    migrating = await app(
      {
        gc: false,
        encryption: {
          keys: { old: OLD_KEY },
          current: 'old',
          readPlaintext: true,
        },
      },
      plain,
    );
  });
  afterAll(async () => {
    await migrating?.close();
    await strict?.close();
    await plain?.close();
  });

  it('refuses a plaintext record with a 503 by default, and replays it byte for byte with readPlaintext, sealing new records', async () => {
    const first = await send(plain, '/privacy/card', { key: 'plaintext-old' });
    expect(first.status).toBe(201);
    const body = Buffer.from(await first.arrayBuffer());
    const runs = () =>
      [plain, strict, migrating]
        .map((target) => target.app.get(PrivacyRuns).card)
        .reduce((a, b) => a + b);
    const ran = runs();

    const refused = await send(strict, '/privacy/card', {
      key: 'plaintext-old',
    });
    expect(refused.status).toBe(503);
    const replay = await send(migrating, '/privacy/card', {
      key: 'plaintext-old',
    });
    expect({
      status: replay.status,
      replayed: replay.headers.get('idempotent-replayed'),
      same: Buffer.from(await replay.arrayBuffer()).equals(body),
    }).toEqual({ status: 201, replayed: 'true', same: true });
    expect(runs()).toBe(ran);

    const fresh = await send(migrating, '/privacy/card', {
      key: 'plaintext-new',
    });
    expect(fresh.status).toBe(201);
    expect(keyIdOf(await storedBody(plain, 'plaintext-new'))).toBe('old');
    // A sealed record is opened and checked as ever: moved, it is refused.
    const moved = await storedResponse(plain, 'plaintext-new');
    await plain.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET response_body = $1 WHERE key = 'plaintext-old'`,
      [moved.stored.body],
    );
    expect(
      (await send(migrating, '/privacy/card', { key: 'plaintext-old' })).status,
    ).toBe(503);
  });

  it("shows a plaintext record as each instance's duplicates read it: unreadable by default, whole with readPlaintext", async () => {
    const first = await send(plain, '/privacy/card', { key: 'plaintext-seen' });
    expect(first.status).toBe(201);
    const body = Buffer.from(await first.arrayBuffer());
    const inspect = (target: TestApp) =>
      target.app
        .get(IdempotencyAdmin)
        .inspect('plaintext-seen', 'global', { body: true });
    expect((await inspect(strict)).response).toEqual({
      status: 201,
      unreadable: expect.stringMatching(/not sealed/) as unknown,
    });
    expect((await inspect(migrating)).response).toEqual({
      status: 201,
      headers: expect.any(Object) as unknown,
      body,
    });
  });

  /** The stored result of `step` of `key`, as the steps table holds it. */
  async function storedStep(key: string, step: string): Promise<unknown> {
    const [row] = await plain.db.query<{ result: unknown }>(
      'SELECT result FROM idempotency_steps WHERE key = $1 AND step = $2',
      [key, step],
    );
    return row?.result;
  }

  it('reads a plaintext body beginning with IDS1, and a step result beginning with idempotency-sealed:, as they are with readPlaintext, and reseals them (reencrypt)', async () => {
    const first = await answer(
      send(plain, '/privacy/lookalike', { key: 'lookalike' }),
    );
    expect(first).toMatchObject({
      status: 201,
      body: expect.stringMatching(/^IDS1-batch-\d+$/) as unknown,
    });
    const body = first.body as string;
    const plainRuns = plain.app.get(PrivacyRuns);
    plainRuns.failSteps = true;
    expect(
      (
        await send(plain, '/privacy/lookalike-steps', {
          key: 'lookalike-steps',
        })
      ).status,
    ).toBe(500);
    const batch = plainRuns.lookalike;
    expect(batch).toMatch(/^idempotency-sealed:batch-\d+$/);
    expect(await storedStep('lookalike-steps', 'batch')).toBe(batch);
    const targets = [plain, strict, migrating];
    const runs = () =>
      targets
        .map((target) => target.app.get(PrivacyRuns))
        .reduce((sum, { card, charges }) => sum + card + charges, 0);
    const ran = runs();

    // Without readPlaintext: refused, as every record not sealed.
    expect(
      await answer(send(strict, '/privacy/lookalike', { key: 'lookalike' })),
    ).toEqual(UNAVAILABLE_ANSWER);
    expect(
      await answer(
        send(strict, '/privacy/lookalike-steps', { key: 'lookalike-steps' }),
      ),
    ).toEqual(UNAVAILABLE_ANSWER);

    // Shown as each instance's duplicates read it: not sealed, no key id.
    const inspect = (target: TestApp) =>
      target.app
        .get(IdempotencyAdmin)
        .inspect('lookalike', 'global', { body: true });
    const whole = {
      status: 201,
      headers: expect.objectContaining({
        'content-type': expect.stringMatching(/^text\/plain/) as unknown,
      }) as unknown,
      body: Buffer.from(body),
    };
    expect((await inspect(plain)).response).toEqual(whole);
    expect((await inspect(migrating)).response).toEqual(whole);
    expect((await inspect(strict)).response).toEqual({
      status: 201,
      unreadable: expect.stringMatching(/^it is not sealed/) as unknown,
    });

    // With readPlaintext: replayed byte for byte, the step not run again.
    expect(
      await answer(send(migrating, '/privacy/lookalike', { key: 'lookalike' })),
    ).toMatchObject({ status: 201, replayed: true, body });
    const migratingRuns = migrating.app.get(PrivacyRuns);
    migratingRuns.failSteps = true;
    expect(
      (
        await send(migrating, '/privacy/lookalike-steps', {
          key: 'lookalike-steps',
        })
      ).status,
    ).toBe(500);
    expect(migratingRuns.lookalike).toBe(batch);
    expect(runs()).toBe(ran);

    // Resealed: then read by an instance without readPlaintext.
    const done = await migrating.app.get(IdempotencyAdmin).reencrypt();
    expect(
      done.unreadable.filter(({ key }) => key.startsWith('lookalike')),
    ).toEqual([]);
    expect(done.steps).toEqual({ resealed: 1, current: 0, changed: 0 });
    expect(keyIdOf(await storedBody(plain, 'lookalike'))).toBe('old');
    const step = await storedStep('lookalike-steps', 'batch');
    expect(step).not.toBe(batch);
    expect(
      strict.app
        .get(IdempotencyPrivacy)
        .openStep('global', 'lookalike-steps', 'batch', step),
    ).toBe(batch);
    expect(
      await answer(send(strict, '/privacy/lookalike', { key: 'lookalike' })),
    ).toMatchObject({ status: 201, replayed: true, body });
    expect(
      await answer(
        send(strict, '/privacy/lookalike-steps', { key: 'lookalike-steps' }),
      ),
    ).toMatchObject({ status: 201, replayed: false, body: { batch } });
    expect(runs()).toBe(ran);
  });

  it('never replays a sealed response or step as its ciphertext with readPlaintext, once its key left the ring: 503, unreadable', async () => {
    const gone = IdempotencyPrivacy.withKeys({
      keys: { gone: randomBytes(32) },
      current: 'gone',
      readPlaintext: true,
    });
    expect(
      (await send(plain, '/privacy/lookalike', { key: 'lookalike-gone' }))
        .status,
    ).toBe(201);
    const { stored } = await storedResponse(plain, 'lookalike-gone');
    const sealed = gone.reencrypt('global', 'lookalike-gone', stored)!;
    await plain.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET response_headers = $1, response_body = $2 WHERE key = 'lookalike-gone'`,
      [sealed.headers, sealed.body],
    );
    plain.app.get(PrivacyRuns).failSteps = true;
    expect(
      (
        await send(plain, '/privacy/lookalike-steps', {
          key: 'lookalike-gone-steps',
        })
      ).status,
    ).toBe(500);
    const step = gone.reencryptStep(
      'global',
      'lookalike-gone-steps',
      'batch',
      await storedStep('lookalike-gone-steps', 'batch'),
    );
    await plain.db.query(
      `UPDATE idempotency_steps SET result = $1 WHERE key = 'lookalike-gone-steps'`,
      [JSON.stringify(step)],
    );
    const runs = migrating.app.get(PrivacyRuns);
    const ran = runs.card + runs.charges;

    expect(
      await answer(
        send(migrating, '/privacy/lookalike', { key: 'lookalike-gone' }),
      ),
    ).toEqual(UNAVAILABLE_ANSWER);
    expect(
      await answer(
        send(migrating, '/privacy/lookalike-steps', {
          key: 'lookalike-gone-steps',
        }),
      ),
    ).toEqual(UNAVAILABLE_ANSWER);
    expect(runs.card + runs.charges).toBe(ran);
    const notInRing = expect.stringMatching(
      /sealed with key "gone", not in the key ring/,
    ) as unknown;
    expect(
      (
        await migrating.app
          .get(IdempotencyAdmin)
          .inspect('lookalike-gone', 'global', { body: true })
      ).response,
    ).toEqual({ status: 201, keyId: 'gone', unreadable: notInRing });
    const done = await migrating.app.get(IdempotencyAdmin).reencrypt();
    expect(
      done.unreadable.filter(({ key }) => key.startsWith('lookalike-gone')),
    ).toEqual([
      { scope: 'global', key: 'lookalike-gone', reason: notInRing },
      {
        scope: 'global',
        key: 'lookalike-gone-steps',
        step: 'batch',
        reason: notInRing,
      },
    ]);
  });
});

describe.each(PLATFORMS)(
  'stored responses encrypted at rest on PostgreSQL (%s)',
  (platform) => {
    /** Seals with `old`, the only key it has. */
    let before: TestApp;
    /** Reads `old` and `new`, seals with `new`. */
    let rotated: TestApp;
    let runs: PrivacyRuns;
    /** What `before` reported. */
    const events: IdempotencyEvent[] = [];

    beforeAll(async () => {
      before = await startTestApp({
        platform,
        idempotency: {
          ...encrypted({ old: OLD_KEY }, 'old'),
          onEvent: (event) => events.push(event),
        },
        controllers: [PrivacyController],
        providers: [PrivacyRuns],
      });
      rotated = await startTestApp({
        platform,
        database: before.db,
        idempotency: encrypted({ old: OLD_KEY, new: NEW_KEY }, 'new'),
        controllers: [PrivacyController],
        providers: [PrivacyRuns],
      });
      runs = before.app.get(PrivacyRuns);
    });
    afterAll(async () => {
      await rotated?.close();
      await before?.close();
    });

    it('stores no plaintext of a body, a header or a step result, and replays them exactly', async () => {
      const first = await send(before, '/privacy/card', { key: 'dump-1' });
      const firstBody = Buffer.from(await first.arrayBuffer());
      expect(first.status).toBe(201);
      expect(first.headers.get('x-account')).toBe(SECRETS.header);
      expect(firstBody.toString()).toContain(SECRETS.holder);

      runs.failSteps = true;
      const failed = await send(before, '/privacy/steps', {
        key: 'dump-steps',
      });
      expect(failed.status).toBe(500);

      expectNoSecret(await dump(before));
      expect(keyIdOf(await storedBody(before, 'dump-1'))).toBe('old');

      const replay = await send(before, '/privacy/card', { key: 'dump-1' });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('x-account')).toBe(SECRETS.header);
      expect(replay.headers.get('content-type')).toBe(
        first.headers.get('content-type'),
      );
      expect(Buffer.from(await replay.arrayBuffer()).equals(firstBody)).toBe(
        true,
      );
      expect(runs.card).toBe(1);

      // The retry reads the sealed step back instead of charging again.
      const charges = runs.charges;
      const retried = await send(before, '/privacy/steps', {
        key: 'dump-steps',
      });
      expect(retried.status).toBe(201);
      expect(await retried.json()).toEqual({
        charge: { token: SECRETS.token },
      });
      expect(runs.charges).toBe(charges);
      expectNoSecret(await dump(before));
    });

    it('refuses with a 503 a body copied onto another record, and a tampered one, replaying nothing', async () => {
      await send(before, '/privacy/card', { key: 'moved-from' });
      await send(before, '/privacy/card', { key: 'moved-to' });
      await send(before, '/privacy/card', { key: 'tampered' });
      await before.db.query(
        `UPDATE ${IDEMPOTENCY_TABLE_NAME} t SET response_body = f.response_body, response_headers = f.response_headers
         FROM ${IDEMPOTENCY_TABLE_NAME} f WHERE f.key = 'moved-from' AND t.key = 'moved-to'`,
      );
      const sealed = await storedBody(before, 'tampered');
      sealed[sealed.length - 1] ^= 1;
      await before.db.query(
        `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET response_body = $1 WHERE key = 'tampered'`,
        [sealed],
      );
      const ran = runs.card;
      for (const key of ['moved-to', 'tampered']) {
        const answer = await send(before, '/privacy/card', { key });
        expect(answer.status).toBe(503);
        expect(answer.headers.get('content-type')).toContain(
          'application/problem+json',
        );
        expect(answer.headers.get('idempotent-replayed')).toBeNull();
        const text = await answer.text();
        expect(text).not.toContain(SECRETS.holder);
        expect(JSON.parse(text)).toMatchObject({ status: 503 });
      }
      expect(runs.card).toBe(ran);
    });

    it('reads old records with a ring of two keys, seals new ones with the current key, and fails closed without the key', async () => {
      const old = await send(before, '/privacy/card', { key: 'rotation-old' });
      const oldBody = Buffer.from(await old.arrayBuffer());
      const replay = await send(rotated, '/privacy/card', {
        key: 'rotation-old',
      });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(Buffer.from(await replay.arrayBuffer()).equals(oldBody)).toBe(
        true,
      );

      const fresh = await send(rotated, '/privacy/card', {
        key: 'rotation-new',
      });
      expect(fresh.status).toBe(201);
      expect(keyIdOf(await storedBody(before, 'rotation-new'))).toBe('new');

      // An instance whose ring lacks the key: 503, nothing replayed or run.
      const ran = runs.card + rotated.app.get(PrivacyRuns).card;
      const missing = await send(before, '/privacy/card', {
        key: 'rotation-new',
      });
      expect(missing.status).toBe(503);
      expect(await missing.text()).not.toContain(SECRETS.holder);
      expect(runs.card + rotated.app.get(PrivacyRuns).card).toBe(ran);
    });

    it('reports an abandoned step whose result its ring cannot open by its name, without its result', async () => {
      // A step sealed with `new`, its request failed after it: the key is
      // bound to it until the collector finds both expired.
      rotated.app.get(PrivacyRuns).failSteps = true;
      const failed = await send(rotated, '/privacy/steps', {
        key: 'abandoned-sealed',
      });
      expect(failed.status).toBe(500);
      for (const table of [IDEMPOTENCY_TABLE_NAME, 'idempotency_steps']) {
        await before.db.query(
          `UPDATE ${table} SET expires_at = now() - interval '1 hour' WHERE key = 'abandoned-sealed'`,
        );
      }
      events.length = 0;
      // `before` has the old key only.
      await before.app.get(IdempotencyCollector).collect();
      expect(events.filter((event) => event.type === 'abandoned')).toEqual([
        expect.objectContaining({
          key: 'abandoned-sealed',
          steps: [
            {
              step: 'charge',
              result: undefined,
              unreadable: expect.stringMatching(/"new"/),
            },
          ],
        }),
      ]);
    });

    it('reseals an old record with the current key (reencrypt), which then needs no old key', async () => {
      const first = await send(before, '/privacy/card', { key: 'reseal' });
      const firstBody = Buffer.from(await first.arrayBuffer());
      const { scope, stored } = await storedResponse(before, 'reseal');
      const privacy = rotated.app.get(IdempotencyPrivacy);
      const resealed = privacy.reencrypt(scope, 'reseal', stored);
      expect(resealed).toBeDefined();
      expect(keyIdOf(resealed!.body)).toBe('new');
      expect(privacy.reencrypt(scope, 'reseal', resealed!)).toBeUndefined();
      expect(privacy.open(scope, 'reseal', resealed!).body).toEqual(firstBody);
      await before.db.query(
        `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET response_headers = $1, response_body = $2 WHERE key = 'reseal'`,
        [JSON.stringify(resealed!.headers), resealed!.body],
      );
      const replay = await send(rotated, '/privacy/card', { key: 'reseal' });
      expect(replay.status).toBe(201);
      expect(Buffer.from(await replay.arrayBuffer()).equals(firstBody)).toBe(
        true,
      );
      expect(
        (await send(before, '/privacy/card', { key: 'reseal' })).status,
      ).toBe(503);
    });
  },
);

describe.each(PLATFORMS)(
  'redaction and the expiry header on PostgreSQL (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        idempotency: {
          gc: false,
          ttl: '2h',
          expiresHeader: true,
          encryption: { keys: { only: NEW_KEY }, current: 'only' },
        },
        controllers: [PrivacyController],
        providers: [PrivacyRuns],
      });
    });
    afterAll(() => target?.close());

    it('stores and replays the redacted response, while the first caller gets the whole one', async () => {
      const sent = Date.now();
      const first = await send(target, '/privacy/redacted', { key: 'red-1' });
      expect(first.status).toBe(201);
      expect(first.headers.get('x-account')).toBe(SECRETS.header);
      expect(await first.json()).toEqual({ run: 1, card: SECRETS.card });
      const expires = Date.parse(first.headers.get('idempotency-expires')!);
      expect(expires).toBeGreaterThanOrEqual(
        Math.floor(sent / 1000) * 1000 + 2 * 3_600_000,
      );
      expect(expires).toBeLessThanOrEqual(Date.now() + 2 * 3_600_000);

      const replay = await send(target, '/privacy/redacted', { key: 'red-1' });
      const body = Buffer.from(await replay.arrayBuffer());
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('x-account')).toBeNull();
      expect(replay.headers.get('idempotency-expires')).toBe(
        first.headers.get('idempotency-expires'),
      );
      expect(body.toString()).toBe('{"run":1,"card":"************1111"}');
      const record = await storedResponse(target, 'red-1');
      const stored = target.app
        .get(IdempotencyPrivacy)
        .open(record.scope, 'red-1', record.stored);
      expect(stored.headers).not.toHaveProperty('x-account');
      expect(stored.headers).toHaveProperty('idempotency-expires');
      expect(replay.headers.get('content-length')).toBe(String(body.length));
      expectNoSecret(await dump(target));
    });

    it('stores no redacted body over maxResponseSize: the key is not replayable, and a duplicate gets the status with the body omitted', async () => {
      const first = await send(target, '/privacy/redacted-larger', {
        key: 'red-large',
      });
      expect(first.status).toBe(201);
      const { run } = (await first.json()) as { run: number };
      const [record] = await target.db.query<{
        status: string;
        response_body: Buffer | null;
      }>(
        `SELECT status, response_body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'red-large'`,
      );
      expect(record).toEqual({ status: 'not_replayable', response_body: null });
      const duplicate = await send(target, '/privacy/redacted-larger', {
        key: 'red-large',
      });
      expect(duplicate.status).toBe(201);
      expect(duplicate.headers.get('idempotent-replayed')).toBe('true');
      expect(duplicate.headers.get('idempotent-body-omitted')).toBe('true');
      expect(await duplicate.text()).toBe('');
      expect(target.app.get(PrivacyRuns).card).toBe(run);
    });

    it('stores no redacted error over maxResponseSize: the key is released, and the retry runs', async () => {
      const runs = target.app.get(PrivacyRuns);
      const first = await send(target, '/privacy/redacted-larger-error', {
        key: 'red-large-error',
      });
      expect(first.status).toBe(400);
      const before = runs.card;
      expect(
        await target.db.query(
          `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'red-large-error'`,
        ),
      ).toEqual([]);
      const retry = await send(target, '/privacy/redacted-larger-error', {
        key: 'red-large-error',
      });
      expect(retry.status).toBe(400);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(((await retry.json()) as { message: string }).message).toBe(
        `run ${before + 1}`,
      );
    });

    it('never stores nor replays the headers a redaction returns that are never stored, and keeps the Content-Type it dropped', async () => {
      const first = await send(target, '/privacy/redacted-headers', {
        key: 'red-headers',
      });
      expect(first.status).toBe(201);
      const replay = await send(target, '/privacy/redacted-headers', {
        key: 'red-headers',
      });
      expect({
        status: replay.status,
        replayed: replay.headers.get('idempotent-replayed'),
        cookie: replay.headers.get('set-cookie'),
        proxy: replay.headers.get('proxy-authorization'),
        kept: replay.headers.get('x-kept'),
        type: replay.headers.get('content-type'),
        body: await replay.text(),
      }).toEqual({
        status: 201,
        replayed: 'true',
        cookie: null,
        proxy: null,
        kept: 'yes',
        type: first.headers.get('content-type'),
        body: await first.text(),
      });
      const record = await storedResponse(target, 'red-headers');
      const stored = target.app
        .get(IdempotencyPrivacy)
        .open(record.scope, 'red-headers', record.stored);
      expect(Object.keys(stored.headers).sort()).toEqual([
        'content-type',
        'idempotency-expires',
        'x-kept',
      ]);
    });

    it('carries the expiry header on a route without redaction, replayed unchanged', async () => {
      const first = await send(target, '/privacy/card', { key: 'exp-1' });
      const replay = await send(target, '/privacy/card', { key: 'exp-1' });
      expect(first.headers.get('idempotency-expires')).toMatch(/ GMT$/);
      expect(replay.headers.get('idempotency-expires')).toBe(
        first.headers.get('idempotency-expires'),
      );
    });
  },
);
