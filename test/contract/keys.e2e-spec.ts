import { request as httpRequest } from 'node:http';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { send, PLATFORMS, type TestApp } from '../utils/test-app.js';
import { answer } from '../utils/problems.js';
import { useContractApp } from './contract-app.js';
import type { Runs } from './contract.module.js';

/** A POST with headers sent exactly as given, repeated names included. */
function postRaw(
  target: TestApp,
  path: string,
  headers: Record<string, string | string[]>,
): Promise<{ status: number; contentType: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      `${target.url}${path}`,
      { method: 'POST', headers },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            contentType: response.headers['content-type'],
            body,
          }),
        );
      },
    );
    request.on('error', reject);
    request.end();
  });
}

describe.each(PLATFORMS)('idempotency keys (%s)', (platform) => {
  let target: TestApp;
  let runs: Runs;

  useContractApp(platform, (app) => ({ target, runs } = app));

  const records = async () =>
    (
      await target.db.query<{ key: string }>(
        `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME} ORDER BY key`,
      )
    ).map((r) => r.key);

  it('accepts a quoted structured-field string as the same key as the token', async () => {
    const token = await send(target, '/keys/default', {
      key: 'sf-1',
      body: { a: 1 },
    });
    expect(token.status).toBe(201);
    const quoted = await send(target, '/keys/default', {
      key: '"sf-1"',
      body: { a: 1 },
    });
    expect(quoted.status).toBe(201);
    expect(quoted.headers.get('idempotent-replayed')).toBe('true');
    expect(await quoted.text()).toBe(await token.text());
  });

  it('unescapes \\" and \\\\ in a quoted key', async () => {
    const quoted = await send(target, '/keys/default', {
      key: '"a\\"b\\\\c"',
      body: {},
    });
    expect(quoted.status).toBe(201);
    expect(await records()).toContain('a"b\\c');
  });

  it.each([
    ['an empty key', ''],
    ['an empty quoted key', '""'],
    ['a key of 256 characters', 'k'.repeat(256)],
    ['a key with a space', 'two words'],
    ['an unterminated quoted key', '"open'],
    ['a quoted key with a bad escape', '"a\\nb"'],
    ['a quoted key with text after it', '"a"b'],
    ['a non-ASCII key', 'clé'],
  ])(
    'refuses %s with 400 problem+json, running nothing and storing nothing',
    async (_case, key) => {
      const before = { ...runs.counts };
      const keysBefore = await records();
      const response = await postRaw(target, '/keys/default', {
        'Idempotency-Key': key,
      });
      expect(response.status).toBe(400);
      expect(response.contentType).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(response.body)).toMatchObject({
        type: 'urn:idempotency:invalid-key',
        status: 400,
      });
      expect(runs.counts).toEqual(before);
      expect(await records()).toEqual(keysBefore);
    },
  );

  it('refuses a key sent in two headers', async () => {
    const before = { ...runs.counts };
    const response = await postRaw(target, '/keys/default', {
      'Idempotency-Key': ['dup-1', 'dup-1'],
    });
    expect(response.status).toBe(400);
    expect(JSON.parse(response.body).detail).toMatch(/repeated/);
    expect(runs.counts).toEqual(before);
  });

  it('accepts a key of exactly 255 visible ASCII characters', async () => {
    const key = '!~'.repeat(127) + 'z';
    const response = await send(target, '/keys/default', { key, body: {} });
    expect(response.status).toBe(201);
  });

  it('applies custom key rules: length, pattern and a validator', async () => {
    const valid = '123e4567-e89b-42d3-a456-426614174000';
    expect((await send(target, '/keys/uuid', { key: valid })).status).toBe(201);
    for (const key of [
      '123e4567-e89b-12d3-a456-426614174000',
      'not-a-uuid',
      valid.toUpperCase(),
    ]) {
      expect((await send(target, '/keys/uuid', { key })).status).toBe(400);
    }
    expect(runs.counts['keys/uuid']).toBe(1);
  });

  it('runs a keyless request normally when the key is optional, storing nothing', async () => {
    const keysBefore = await records();
    const first = await send(target, '/keys/optional', { body: { n: 1 } });
    const second = await send(target, '/keys/optional', { body: { n: 1 } });
    expect([first.status, second.status]).toEqual([201, 201]);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(runs.counts['keys/optional']).toBe(2);
    expect(await records()).toEqual(keysBefore);
    // With a key, the same route is idempotent.
    await send(target, '/keys/optional', { key: 'opt-1', body: { n: 1 } });
    const replay = await send(target, '/keys/optional', {
      key: 'opt-1',
      body: { n: 1 },
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.counts['keys/optional']).toBe(3);
  });

  it('refuses a request its key option finds no key in with 400 problem+json naming the option, not the header, running and storing nothing', async () => {
    const keysBefore = await records();
    // The header is not what the route reads: it changes nothing.
    for (const key of [undefined, 'header-key']) {
      const response = await send(target, '/keys/derived-or-none', {
        key,
        body: { amount: 5 },
      });
      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toMatch(
        /^application\/problem\+json/,
      );
      expect(await response.json()).toEqual({
        type: 'urn:idempotency:missing-key',
        title: 'Idempotency key missing',
        status: 400,
        detail: 'The "key" option found no idempotency key for this operation.',
      });
    }
    // A key it derives that breaks the rules is the option's too.
    const invalid = await send(target, '/keys/derived-or-none', {
      body: { orderId: 'two words' },
    });
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toEqual({
      type: 'urn:idempotency:invalid-key',
      title: 'Invalid idempotency key',
      status: 400,
      detail:
        'The key of the "key" option is invalid: it has an invalid format.',
    });
    expect(runs.counts['keys/derived-or-none']).toBeUndefined();
    expect(await records()).toEqual(keysBefore);

    const derived = await send(target, '/keys/derived-or-none', {
      body: { orderId: 'order-1' },
    });
    expect(derived.status).toBe(201);
    expect(runs.counts['keys/derived-or-none']).toBe(1);
    expect(await records()).toContain('order-1');
  });

  it('refuses a key with a lone surrogate with 400, whatever its pattern lets through, running and storing nothing: it never shares the record of the key PostgreSQL writes in its place (U+FFFD)', async () => {
    const post = (orderId: string) =>
      answer(send(target, '/keys/any-text', { body: { orderId } }));
    expect(await post('order-\ud800')).toEqual({
      status: 400,
      contentType: expect.stringMatching(/^application\/problem\+json/),
      retryAfter: null,
      replayed: false,
      body: {
        type: 'urn:idempotency:invalid-key',
        title: 'Invalid idempotency key',
        status: 400,
        detail:
          'The key of the "key" option is invalid: it is not well-formed Unicode (it has a lone surrogate).',
      },
    });
    expect(runs.counts['keys/any-text']).toBeUndefined();
    expect(await records()).not.toContain('order-\ufffd');
    expect(await post('order-\ufffd')).toMatchObject({
      status: 201,
      replayed: false,
      body: { run: 1, body: { orderId: 'order-\ufffd' } },
    });
  });

  it('refuses a key with a NUL character, which PostgreSQL refuses, with 400, whatever its pattern lets through, never a 503 to retry for ever', async () => {
    const before = { ...runs.counts };
    const response = await answer(
      send(target, '/keys/any-text', { body: { orderId: 'order\u0000x' } }),
    );
    expect(response).toMatchObject({
      status: 400,
      retryAfter: null,
      body: {
        type: 'urn:idempotency:invalid-key',
        detail:
          'The key of the "key" option is invalid: it has a NUL character (U+0000), which PostgreSQL cannot store.',
      },
    });
    expect(runs.counts).toEqual(before);
  });

  it('refuses a key longer than 1,024 bytes of UTF-8 with 400, whatever maxLength (1,024 UTF-16 code units) lets through: PostgreSQL’s index cannot take it', async () => {
    const before = { ...runs.counts };
    const key = '鍵'.repeat(1024);
    const response = await answer(
      send(target, '/keys/any-text', { body: { orderId: key } }),
    );
    expect(response).toMatchObject({
      status: 400,
      retryAfter: null,
      body: {
        type: 'urn:idempotency:invalid-key',
        detail:
          'The key of the "key" option is invalid: it is 3072 bytes long in UTF-8, more than the 1024 a key may have.',
      },
    });
    expect(runs.counts).toEqual(before);
    // The longest that fits.
    const longest = `${'鍵'.repeat(341)}k`;
    for (const replayed of [false, true]) {
      expect(
        await answer(
          send(target, '/keys/any-text', { body: { orderId: longest } }),
        ),
      ).toMatchObject({ status: 201, replayed });
    }
  });

  it('derives the key from the request when the route says so', async () => {
    const first = await send(target, '/keys/derived', {
      body: { userId: 'u1', amount: 5 },
    });
    const second = await send(target, '/keys/derived', {
      body: { userId: 'u1', amount: 5 },
    });
    const other = await send(target, '/keys/derived', {
      body: { userId: 'u1', amount: 6 },
    });
    expect([first.status, second.status, other.status]).toEqual([
      201, 201, 201,
    ]);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(other.headers.get('idempotent-replayed')).toBeNull();
    expect(runs.counts['keys/derived']).toBe(2);
  });
});
