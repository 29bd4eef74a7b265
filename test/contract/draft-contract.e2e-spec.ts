import type { INestApplication } from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { IdempotencyConfigurationError } from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Barrier } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type Platform,
  type TestApp,
  type TestAppOptions,
} from '../utils/test-app.js';
import {
  DraftContractModule,
  DraftRuns,
  READ_MODULES,
  ReadsOnlyController,
  moduleOf,
} from './draft-contract.module.js';

const PROBLEM = /^application\/problem\+json/;
const DOCS = 'https://docs.example.com/errors/';

/** A request with a body as a client may send it, raw. */
function post(
  target: TestApp,
  path: string,
  init: {
    key?: string;
    type?: string;
    body?: string | Uint8Array | ReadableStream<Uint8Array>;
  },
): Promise<Response> {
  const headers: Record<string, string> = {};
  if (init.key !== undefined) {
    headers['Idempotency-Key'] = init.key;
  }
  if (init.type !== undefined) {
    headers['Content-Type'] = init.type;
  }
  return fetch(`${target.url}${path}`, {
    method: 'POST',
    headers,
    body: init.body,
    // A stream is sent chunked (Transfer-Encoding, no Content-Length).
    ...(init.body instanceof ReadableStream ? { duplex: 'half' } : {}),
  } as RequestInit);
}

/** A body sent in chunks, without a Content-Length. */
function chunked(text: string): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(text));
      controller.close();
    },
  });
}

/** The application of these tests on `platform`, and its run counters. */
function useDraftApp(
  platform: Platform,
  options: Omit<TestAppOptions, 'platform' | 'imports'>,
  ready: (target: TestApp, runs: DraftRuns) => void,
): void {
  let target: TestApp | undefined;
  beforeAll(async () => {
    target = await startTestApp({
      ...options,
      platform,
      imports: [DraftContractModule],
    });
    ready(target, target.app.get(DraftRuns));
  });
  afterAll(() => target?.close());
}

/** The records of `key`, and the orders its handler wrote. */
async function traces(target: TestApp, key: string, route: string) {
  const records = await target.db.query<{ status: string }>(
    `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
    [key],
  );
  const orders = await target.db.query(
    `SELECT 1 FROM orders WHERE reference LIKE $1`,
    [`draft-${route}-%`],
  );
  return {
    records: records.map(({ status }) => status),
    orders: orders.length,
  };
}

/** Registers a parser of `application/octet-stream` bodies into a Buffer. */
function rawParser(platform: Platform) {
  return (app: INestApplication) => {
    if (platform === 'express') {
      (app as NestExpressApplication).useBodyParser('raw');
    } else {
      (app as NestFastifyApplication).useBodyParser('application/octet-stream');
    }
  };
}

describe.each(PLATFORMS)('a body the module cannot read (%s)', (platform) => {
  let target: TestApp;
  let runs: DraftRuns;
  useDraftApp(platform, {}, (app, counters) => {
    target = app;
    runs = counters;
  });

  it('never takes a text/plain body for an empty one: two texts under one key are never one request', async () => {
    const first = await post(target, '/draft/notes', {
      key: 'text-1',
      type: 'text/plain',
      body: 'pay 10',
    });
    const second = await post(target, '/draft/notes', {
      key: 'text-1',
      type: 'text/plain',
      body: 'pay 20',
    });
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    if (platform === 'express') {
      // Express parses no text by default: refused before anything runs.
      for (const answer of [first, second]) {
        expect(answer.status).toBe(415);
        expect(answer.headers.get('content-type')).toMatch(PROBLEM);
        expect(await answer.json()).toEqual({
          type: 'urn:idempotency:unreadable-body',
          title: 'Request body not readable',
          status: 415,
          detail:
            "The body of this request (of a media type that has no parser in the application) was not parsed by the application, so it cannot be told apart from another request with the same idempotency key; nothing ran. Send the body in a format this endpoint parses, such as application/json, or register a parser for its media type in the application (for example app.useBodyParser('text')).",
        });
      }
      expect(runs.counts.notes).toBeUndefined();
      expect(await traces(target, 'text-1', 'notes')).toEqual({
        records: [],
        orders: 0,
      });
    } else {
      // Fastify parses text/plain itself: the texts are fingerprinted.
      expect(first.status).toBe(201);
      expect(await first.json()).toEqual({ run: 1, body: 'pay 10' });
      expect(second.status).toBe(422);
      expect(((await second.json()) as { type: string }).type).toBe(
        'urn:idempotency:key-reused',
      );
      expect(runs.counts.notes).toBe(1);
    }
  });

  it('refuses with 415 a body of a type no parser takes: nothing runs, no record', async () => {
    const before = runs.counts.notes ?? 0;
    const answer = await post(target, '/draft/notes', {
      key: 'octets-1',
      type: 'application/octet-stream',
      body: new Uint8Array([1, 2, 3]),
    });
    // Fastify refuses a content type it has no parser for itself.
    expect(answer.status).toBe(415);
    if (platform === 'express') {
      expect(((await answer.json()) as { type: string }).type).toBe(
        'urn:idempotency:unreadable-body',
      );
    }
    expect(runs.counts.notes ?? 0).toBe(before);
    expect(await traces(target, 'octets-1', 'notes')).toMatchObject({
      records: [],
    });
  });

  it.each([
    ['markup', 'text/<script>alert(1)</script>'],
    ['a long type', `application/x-${'a'.repeat(4000)}`],
    ['parameters', 'text/plain-ish; charset="<img src=x onerror=alert(1)>"'],
  ])(
    'never echoes the Content-Type of a body it cannot read (%s): nothing runs, no record',
    async (what, type) => {
      const before = runs.counts.notes ?? 0;
      const key = `echo-${what.replace(/\W/g, '-')}`;
      const answer = await post(target, '/draft/notes', {
        key,
        type,
        body: 'pay 40',
      });
      expect(answer.status).toBe(415);
      const text = await answer.text();
      for (const echoed of ['script', 'alert', 'x-aaaa', 'plain-ish']) {
        expect(text).not.toContain(echoed);
      }
      if (platform === 'express') {
        expect(answer.headers.get('content-type')).toMatch(PROBLEM);
        expect(JSON.parse(text)).toEqual({
          type: 'urn:idempotency:unreadable-body',
          title: 'Request body not readable',
          status: 415,
          detail: `The body of this request (of a media type that has no parser in the application) was not parsed by the application, so it cannot be told apart from another request with the same idempotency key; nothing ran. Send the body in a format this endpoint parses, such as application/json, or register a parser for its media type in the application (for example app.useBodyParser('${type.startsWith('text/') ? 'text' : 'raw'}')).`,
        });
      }
      expect(runs.counts.notes ?? 0).toBe(before);
      expect((await traces(target, key, 'notes')).records).toEqual([]);
    },
  );

  it.each([
    ['whole', () => new TextEncoder().encode('pay 30')],
    ['chunked', () => chunked('pay 30')],
  ])(
    'refuses a body without a Content-Type, sent %s: nothing runs, no record',
    async (how, body) => {
      const before = runs.counts.notes ?? 0;
      const answer = await post(target, '/draft/notes', {
        key: `untyped-${how}`,
        body: body(),
      });
      expect(answer.status).toBe(415);
      expect(answer.headers.get('idempotent-replayed')).toBeNull();
      if (platform === 'express') {
        expect(await answer.json()).toMatchObject({
          type: 'urn:idempotency:unreadable-body',
          detail: expect.stringContaining(
            'The body of this request (without a Content-Type) was not parsed',
          ) as string,
        });
      }
      expect(runs.counts.notes ?? 0).toBe(before);
      expect((await traces(target, `untyped-${how}`, 'notes')).records).toEqual(
        [],
      );
    },
  );

  it('runs a keyless request, or a route with its own fingerprint, whatever its body', async () => {
    const keyless = await post(target, '/draft/optional', {
      type: 'text/plain',
      body: 'no key',
    });
    expect(keyless.status).toBe(201);
    const first = await post(target, '/draft/own-fingerprint', {
      key: 'own-1',
      type: 'text/plain',
      body: 'one',
    });
    expect(first.status).toBe(201);
    const again = await post(target, '/draft/own-fingerprint', {
      key: 'own-1',
      type: 'text/plain',
      body: 'one',
    });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.text()).toBe(await first.text());
    expect(runs.counts['own-fingerprint']).toBe(1);
  });
});

// Express only: Fastify keeps its parsed body apart from the Node.js request
// that middleware sees, and refuses a content type it cannot parse itself.
describe('a body left unread under a placeholder (express)', () => {
  let target: TestApp;
  let runs: DraftRuns;
  useDraftApp(
    'express',
    {
      // As body-parser 1.x does for the content types it skips.
      configure: (app) =>
        app.use(
          (
            request: { body?: unknown },
            _response: unknown,
            next: () => void,
          ) => {
            request.body ??= {};
            next();
          },
        ),
    },
    (app, counters) => {
      target = app;
      runs = counters;
    },
  );

  it('is refused, never fingerprinted as the placeholder', async () => {
    for (const body of ['pay 10', 'pay 20']) {
      const answer = await post(target, '/draft/notes', {
        key: 'placeholder-1',
        type: 'text/plain',
        body,
      });
      expect(answer.status).toBe(415);
      expect(((await answer.json()) as { type: string }).type).toBe(
        'urn:idempotency:unreadable-body',
      );
    }
    const json = await send(target, '/draft/notes', {
      key: 'placeholder-2',
      body: { amount: 1 },
    });
    expect(json.status).toBe(201);
    expect(runs.counts.notes).toBe(1);
    expect(await traces(target, 'placeholder-1', 'notes')).toMatchObject({
      records: [],
    });
  });
});

describe.each(PLATFORMS)(
  'a body the application parses into bytes (%s)',
  (platform) => {
    let target: TestApp;
    let runs: DraftRuns;
    useDraftApp(
      platform,
      { configure: rawParser(platform) },
      (app, counters) => {
        target = app;
        runs = counters;
      },
    );

    it('is fingerprinted from its bytes: the same bytes replay, other bytes get 422', async () => {
      const bytes = (values: number[]) => ({
        key: 'bytes-1',
        type: 'application/octet-stream',
        body: new Uint8Array(values),
      });
      const first = await post(target, '/draft/notes', bytes([1, 2, 3]));
      expect(first.status).toBe(201);
      expect(await first.json()).toEqual({ run: 1, body: '010203' });
      const same = await post(target, '/draft/notes', bytes([1, 2, 3]));
      expect(same.headers.get('idempotent-replayed')).toBe('true');
      expect(await same.json()).toEqual({ run: 1, body: '010203' });
      const other = await post(target, '/draft/notes', bytes([1, 2, 4]));
      expect(other.status).toBe(422);
      expect(runs.counts.notes).toBe(1);
      expect(await traces(target, 'bytes-1', 'notes')).toEqual({
        records: ['completed'],
        orders: 1,
      });
    });
  },
);

describe.each(PLATFORMS)(
  'a duplicate of a response that was not stored (%s)',
  (platform) => {
    let target: TestApp;
    let runs: DraftRuns;
    useDraftApp(platform, {}, (app, counters) => {
      target = app;
      runs = counters;
    });

    it.each([
      ['over maxResponseSize', 'large', 201],
      ['streamed', 'stream', 202],
    ] as const)(
      'gets the original status (%s), an empty body and Idempotent-Body-Omitted, never 422 nor a second run',
      async (_what, route, status) => {
        const key = `omitted-${route}`;
        const first = await send(target, `/draft/${route}`, { key });
        expect(first.status).toBe(status);
        expect((await first.arrayBuffer()).byteLength).toBeGreaterThan(0);
        expect(first.headers.get('idempotent-body-omitted')).toBeNull();
        for (let retry = 0; retry < 2; retry += 1) {
          const duplicate = await send(target, `/draft/${route}`, { key });
          expect(duplicate.status).toBe(status);
          expect(duplicate.headers.get('idempotent-replayed')).toBe('true');
          expect(duplicate.headers.get('idempotent-body-omitted')).toBe('true');
          expect(duplicate.headers.get('content-length')).toBe('0');
          expect(await duplicate.text()).toBe('');
        }
        expect(runs.counts[route]).toBe(1);
        expect(await traces(target, key, route)).toEqual({
          records: ['not_replayable'],
          orders: 1,
        });
      },
    );

    it("gets a web Response's own status, and never a 5xx one's as processed: that attempt rolls back and its retry runs", async () => {
      const created = await send(target, '/draft/web-response', {
        key: 'web-404',
        body: { status: 404 },
      });
      expect(created.status).toBe(404);
      const duplicate = await send(target, '/draft/web-response', {
        key: 'web-404',
        body: { status: 404 },
      });
      expect(duplicate.status).toBe(404);
      expect(duplicate.headers.get('idempotent-replayed')).toBe('true');
      expect(duplicate.headers.get('idempotent-body-omitted')).toBe('true');

      const failed = await send(target, '/draft/web-response', {
        key: 'web-502',
        body: { status: 502 },
      });
      expect(failed.status).toBe(502);
      expect(await traces(target, 'web-502', 'web-response')).toEqual({
        records: [],
        orders: 1,
      });
      const retried = await send(target, '/draft/web-response', {
        key: 'web-502',
        body: { status: 502 },
      });
      expect(retried.status).toBe(502);
      expect(retried.headers.get('idempotent-replayed')).toBeNull();
      expect(runs.counts['web-response']).toBe(3);
    });

    it('still refuses a reused key with 422 there', async () => {
      await send(target, '/draft/large', { key: 'omitted-reused' });
      const other = await send(target, '/draft/large', {
        key: 'omitted-reused',
        body: { other: true },
      });
      expect(other.status).toBe(422);
      expect(other.headers.get('idempotent-body-omitted')).toBeNull();
      expect(((await other.json()) as { type: string }).type).toBe(
        'urn:idempotency:key-reused',
      );
    });
  },
);

describe.each(PLATFORMS)('replayHeaderName (%s)', (platform) => {
  let target: TestApp;
  useDraftApp(
    platform,
    { idempotency: { replayHeaderName: 'Idempotency-Replayed' } },
    (app) => {
      target = app;
    },
  );

  it('names the replay header of every replay, and the default is not sent', async () => {
    const first = await send(target, '/draft/notes', {
      key: 'named-1',
      body: { amount: 1 },
    });
    expect(first.headers.get('idempotency-replayed')).toBeNull();
    const replay = await send(target, '/draft/notes', {
      key: 'named-1',
      body: { amount: 1 },
    });
    expect(replay.headers.get('idempotency-replayed')).toBe('true');
    expect(replay.headers.get('idempotent-replayed')).toBeNull();
    expect(await replay.json()).toEqual(await first.json());

    await send(target, '/draft/large', { key: 'named-large' });
    const omitted = await send(target, '/draft/large', { key: 'named-large' });
    expect(omitted.headers.get('idempotency-replayed')).toBe('true');
    expect(omitted.headers.get('idempotent-replayed')).toBeNull();
    expect(omitted.headers.get('idempotent-body-omitted')).toBe('true');
  });
});

describe.each(PLATFORMS)('problemTypeBaseUrl (%s)', (platform) => {
  let target: TestApp;
  let runs: DraftRuns;
  useDraftApp(
    platform,
    { idempotency: { problemTypeBaseUrl: DOCS } },
    (app, counters) => {
      target = app;
      runs = counters;
    },
  );

  const problemOf = async (answer: Response) => {
    expect(answer.headers.get('content-type')).toMatch(PROBLEM);
    return (await answer.json()) as { type: string; status: number };
  };

  it('points the type of every problem at the documentation', async () => {
    expect(await problemOf(await send(target, '/draft/notes'))).toMatchObject({
      type: `${DOCS}missing-key`,
      status: 400,
    });
    expect(
      await problemOf(await send(target, '/draft/notes', { key: 'a b' })),
    ).toMatchObject({ type: `${DOCS}invalid-key`, status: 400 });

    await send(target, '/draft/notes', { key: 'typed-1', body: { n: 1 } });
    expect(
      await problemOf(
        await send(target, '/draft/notes', { key: 'typed-1', body: { n: 2 } }),
      ),
    ).toMatchObject({ type: `${DOCS}key-reused`, status: 422 });

    runs.barrier = new Barrier();
    const held = send(target, '/draft/held', { key: 'typed-held' });
    await runs.barrier.reached(1);
    const conflict = await send(target, '/draft/held', { key: 'typed-held' });
    expect(conflict.headers.get('retry-after')).toBe('1');
    expect(await problemOf(conflict)).toMatchObject({
      type: `${DOCS}request-in-progress`,
      status: 409,
    });
    runs.barrier.open();
    expect((await held).status).toBe(201);

    if (platform === 'express') {
      expect(
        await problemOf(
          await post(target, '/draft/notes', {
            key: 'typed-text',
            type: 'text/plain',
            body: 'text',
          }),
        ),
      ).toMatchObject({ type: `${DOCS}unreadable-body`, status: 415 });
    }
  });
});

describe.each(PLATFORMS)('@Idempotent() on a read (%s)', (platform) => {
  it.each(Object.entries(READ_MODULES))(
    'refuses a route of method %s at bootstrap, naming it and saying why',
    async (method, [where, controller]) => {
      const started = startTestApp({
        platform,
        imports: [moduleOf(controller)],
      });
      await expect(started).rejects.toThrow(IdempotencyConfigurationError);
      await expect(started).rejects.toThrow(
        `@Idempotent() on ${where} (${method}): a read must not be deduplicated.`,
      );
      await expect(started).rejects.toThrow(
        /a replay would answer it with the stored, stale response of the first one/,
      );
    },
  );

  it('refuses a controller-wide @Idempotent() that has only reads to act on', async () => {
    await expect(
      startTestApp({ platform, imports: [moduleOf(ReadsOnlyController)] }),
    ).rejects.toThrow(
      '@Idempotent() has no effect on class ReadsOnlyController (its routes are reads, which it leaves alone)',
    );
  });

  describe('on a controller', () => {
    let target: TestApp;
    let runs: DraftRuns;
    useDraftApp(platform, {}, (app, counters) => {
      target = app;
      runs = counters;
    });

    it('leaves its reads alone and makes its routes that change state idempotent', async () => {
      for (const expected of [1, 2]) {
        const read = await send(target, '/class-wide', {
          method: 'GET',
          key: 'read-1',
        });
        expect(read.status).toBe(200);
        expect(read.headers.get('idempotent-replayed')).toBeNull();
        expect(await read.json()).toEqual({ run: expected });
      }
      for (const method of ['SEARCH', 'QUERY']) {
        for (const expected of [1, 2]) {
          const read = await send(target, '/class-wide', {
            method,
            key: `read-${method}`,
            // Fastify asks a QUERY for its content type: a body's.
            body: {},
          });
          expect({
            method,
            status: read.status,
            body: await read.text(),
          }).toEqual({
            method,
            status: 200,
            body: JSON.stringify({ run: expected }),
          });
          expect(read.headers.get('idempotent-replayed')).toBeNull();
        }
      }
      for (let i = 0; i < 2; i += 1) {
        const write = await send(target, '/class-wide', { key: 'write-1' });
        expect(await write.json()).toEqual({ run: 1 });
      }
      expect(runs.counts).toMatchObject({
        'class-wide/list': 2,
        'class-wide/search': 2,
        'class-wide/query': 2,
        'class-wide/create': 1,
      });
      expect(
        await target.db.query(
          `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key IN ('read-1', 'write-1')`,
        ),
      ).toEqual([{ key: 'write-1' }]);
    });
  });
});
