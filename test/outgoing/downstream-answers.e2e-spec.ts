import {
  createServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import {
  Controller,
  Injectable,
  InternalServerErrorException,
  Module,
  Post,
} from '@nestjs/common';
import {
  IdempotencyConfigurationError,
  IdempotencyContext,
  Idempotent,
  type IdempotentFetchInit,
} from '../../src/index.js';
import { answer } from '../utils/problems.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';

/*
 * IdempotencyContext.fetch() against a real HTTP downstream whose answer
 * each test writes byte for byte, and a handler whose call each test
 * writes: the answers and the calls that the common downstream of
 * outgoing.e2e-spec.ts never makes.
 */

/** One request the downstream received. */
interface Received {
  readonly method: string;
  readonly key: string | undefined;
  readonly body: string;
}

/** A downstream that answers each request as the test says. */
class WrittenDownstream {
  readonly received: Received[] = [];
  /** Answers one request. */
  answer: (request: IncomingMessage, response: ServerResponse) => void = (
    _request,
    response,
  ) => response.writeHead(204).end();
  private server?: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const key = request.headers['idempotency-key'];
        this.received.push({
          method: request.method ?? '',
          key: typeof key === 'string' ? key : undefined,
          body: Buffer.concat(chunks).toString(),
        });
        this.answer(request, response);
      });
    });
    await new Promise<void>((resolve) =>
      this.server!.listen(0, '127.0.0.1', resolve),
    );
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>(
      (resolve) => this.server?.close(() => resolve()) ?? resolve(),
    );
  }
}

/** What the handler does, set by each test. */
@Injectable()
class CallScript {
  /** The handler's call. */
  call: (idempotency: IdempotencyContext) => Promise<unknown> = () =>
    Promise.resolve({});
  /** Fails the handler once, after its call: its step is kept. */
  failAfterCall = false;
  /** What the call threw, if it did. */
  thrown: unknown;
}

@Controller('call')
class CallController {
  constructor(
    private readonly idempotency: IdempotencyContext,
    private readonly script: CallScript,
  ) {}

  @Post()
  @Idempotent()
  async call(): Promise<unknown> {
    let result: unknown;
    try {
      result = await this.script.call(this.idempotency);
    } catch (error) {
      this.script.thrown = error;
      throw error;
    }
    if (this.script.failAfterCall) {
      this.script.failAfterCall = false;
      throw new InternalServerErrorException('failed after the call');
    }
    return result;
  }
}

@Module({ controllers: [CallController], providers: [CallScript] })
class CallModule {}

/** The bytes of `text` in UTF-8, as Node.js writes a reason phrase (latin1). */
const utf8OnTheWire = (text: string) =>
  Buffer.from(text, 'utf8').toString('latin1');

describe('IdempotencyContext.fetch(): what the downstream answers', () => {
  let downstream: WrittenDownstream;
  let target: TestApp;
  let script: CallScript;

  beforeAll(async () => {
    downstream = await new WrittenDownstream().start();
    target = await startTestApp({
      imports: [CallModule],
      idempotency: {
        outgoing: {
          retry: { attempts: 3, baseDelayMs: 5, maxDelayMs: 20 },
          timeoutMs: 5_000,
        },
      },
    });
    script = target.app.get(CallScript);
  });
  afterAll(async () => {
    await target.close();
    await downstream.stop();
  });
  beforeEach(() => {
    downstream.received.length = 0;
    script.failAfterCall = false;
    script.thrown = undefined;
  });

  /** The charge, its status and reason phrase, as the handler saw them. */
  const charge = async (idempotency: IdempotencyContext) => {
    const response = await idempotency.fetch(
      'charge',
      `${downstream.url}/charges`,
      { method: 'POST', body: '{"amount":1250}' },
    );
    return {
      status: response.status,
      statusText: response.statusText,
      charge: (await response.json()) as unknown,
    };
  };
  /** The stored answer of the step `charge` of the request `key`. */
  const storedAnswer = async (key: string) =>
    (
      await target.db.query<{ result: Record<string, unknown> }>(
        `SELECT result FROM idempotency_steps WHERE key = $1 AND step = 'charge'`,
        [key],
      )
    ).map((row) => row.result);
  /**
   * Sends the request `key` `times` (the first and its retries): each is
   * refused with the handler's 500, `fetch()` having thrown an
   * `IdempotencyConfigurationError` before anything was sent or stored.
   * @returns that error, of the last time.
   */
  const refusedAsMisconfigured = async (key: string, times = 1) => {
    for (let attempt = 1; attempt <= times; attempt += 1) {
      script.thrown = undefined;
      expect(await answer(send(target, '/call', { key, body: {} }))).toEqual({
        status: 500,
        contentType: expect.stringMatching(/^application\/json/),
        retryAfter: null,
        replayed: false,
        body: { statusCode: 500, message: 'Internal server error' },
      });
      expect(script.thrown).toBeInstanceOf(IdempotencyConfigurationError);
    }
    expect(downstream.received).toEqual([]);
    expect(await storedAnswer(key)).toEqual([]);
    return script.thrown as Error;
  };
  const FAILED_AFTER_CALL = {
    status: 500,
    contentType: expect.stringMatching(/^application\/json/),
    retryAfter: null,
    replayed: false,
    body: {
      statusCode: 500,
      message: 'failed after the call',
      error: 'Internal Server Error',
    },
  };

  describe('a reason phrase that a Response refuses', () => {
    it('is left out of the stored answer: the call is made once, and the request and its retry get the answer', async () => {
      downstream.answer = (_request, response) =>
        response
          .writeHead(201, utf8OnTheWire('Создано'), {
            'content-type': 'application/json',
          })
          .end('{"id":"ch_1"}');
      script.call = charge;
      script.failAfterCall = true;

      const failed = await answer(
        send(target, '/call', { key: 'reason-utf8', body: {} }),
      );
      expect(failed).toEqual(FAILED_AFTER_CALL);
      expect(await storedAnswer('reason-utf8')).toEqual([
        expect.objectContaining({
          status: 201,
          statusText: '',
          body: '{"id":"ch_1"}',
        }),
      ]);

      const retried = await answer(
        send(target, '/call', { key: 'reason-utf8', body: {} }),
      );
      expect(retried).toEqual({
        status: 201,
        contentType: expect.stringMatching(/^application\/json/),
        retryAfter: null,
        replayed: false,
        body: { status: 201, statusText: '', charge: { id: 'ch_1' } },
      });
      expect(script.thrown).toBeUndefined();
      expect(downstream.received).toHaveLength(1);
    });

    it('stored by an earlier version, is left out when the answer is given back', async () => {
      downstream.answer = (_request, response) =>
        response
          .writeHead(201, 'Created', { 'content-type': 'application/json' })
          .end('{"id":"ch_2"}');
      script.call = charge;
      script.failAfterCall = true;
      const failed = await answer(
        send(target, '/call', { key: 'reason-stored', body: {} }),
      );
      expect(failed).toEqual(FAILED_AFTER_CALL);
      // What an earlier version stored: the reason phrase as fetch gave it.
      const [updated] = await target.db.query<{ n: number }>(
        `WITH changed AS (
           UPDATE idempotency_steps
              SET result = jsonb_set(result, '{statusText}', to_jsonb('Создано'::text))
            WHERE key = 'reason-stored' AND step = 'charge' RETURNING 1)
         SELECT count(*)::int AS n FROM changed`,
      );
      expect(updated).toEqual({ n: 1 });

      const retried = await answer(
        send(target, '/call', { key: 'reason-stored', body: {} }),
      );
      expect(retried.status).toBe(201);
      expect(retried.body).toEqual({
        status: 201,
        statusText: '',
        charge: { id: 'ch_2' },
      });
      expect(downstream.received).toHaveLength(1);
    });

    it('keeps a reason phrase a Response takes, characters up to 0xFF included', async () => {
      // Read by fetch as UTF-8: `é` is U+00E9, which a Response takes.
      downstream.answer = (_request, response) =>
        response
          .writeHead(201, utf8OnTheWire('Créé\tOK'), {
            'content-type': 'application/json',
          })
          .end('{"id":"ch_3"}');
      script.call = charge;
      const done = await answer(
        send(target, '/call', { key: 'reason-latin1', body: {} }),
      );
      expect(done.status).toBe(201);
      expect(done.body).toEqual({
        status: 201,
        statusText: 'Créé\tOK',
        charge: { id: 'ch_3' },
      });
    });
  });

  describe('a call that fetch cannot build', () => {
    it.each<[string, (url: string) => [string, IdempotentFetchInit]]>([
      [
        'a URL with credentials',
        (url) => [
          url.replace('http://', 'http://alice:s3cr3t@') + '/charges',
          { method: 'POST', body: '{"amount":1250}' },
        ],
      ],
      [
        'a GET with a body',
        (url) => [`${url}/charges`, { method: 'GET', body: 's3cr3t' }],
      ],
      [
        'an invalid header value',
        (url) => [
          `${url}/charges`,
          {
            method: 'POST',
            headers: { authorization: 'Bearer s3cr3t\nx' },
            body: '{"amount":1250}',
          },
        ],
      ],
      // Built by fetch (Node.js), then refused at every attempt, unsent.
      [
        'an Expect header',
        (url) => [
          `${url}/charges`,
          {
            method: 'POST',
            headers: { expect: '100-continue' },
            body: '{"amount":1250}',
          },
        ],
      ],
      [
        "a Content-Length that is not the body's",
        (url) => [
          `${url}/charges`,
          {
            method: 'POST',
            headers: { 'content-length': '999' },
            body: '{"amount":1250}',
          },
        ],
      ],
    ])(
      'is a configuration error before anything is sent: %s',
      async (name, make) => {
        script.call = (idempotency) => {
          const [url, init] = make(downstream.url);
          return idempotency.fetch('charge', url, init);
        };
        // The request, then its retry: the same refusal, nothing sent.
        const thrown = await refusedAsMisconfigured(
          `unbuildable-${name.replaceAll(' ', '-')}`,
          2,
        );
        expect(thrown.message).toMatch(
          /^fetch cannot build the request of the call of step "charge"/,
        );
        expect(thrown.message).not.toMatch(/s3cr3t/);
        expect((thrown.cause as Error).name).toBe('TypeError');
      },
    );
  });

  describe('a URL whose scheme is not http: or https:', () => {
    it.each<[string, (url: string) => string]>([
      ['ftp:', (url) => `${url.replace('http://', 'ftp://')}/charges?s3cr3t`],
      ['file:', () => 'file:///tmp/s3cr3t/charges'],
      ['data:', () => 'data:application/json,{"s3cr3t":true}'],
      ['a user taken for a scheme', (url) => `alice:s3cr3t@${url.slice(7)}`],
    ])(
      'is a configuration error before anything is sent: %s',
      async (name, make) => {
        let fetched = 0;
        script.call = (idempotency) =>
          idempotency.fetch('charge', make(downstream.url), {
            method: 'POST',
            body: '{"amount":1250}',
            idempotency: {
              fetch: (input, init) => {
                fetched += 1;
                return fetch(input, init);
              },
            },
          });
        // The request, then its retry: the same refusal, nothing sent.
        const thrown = await refusedAsMisconfigured(
          `scheme-${name.replaceAll(' ', '-')}`,
          2,
        );
        expect(thrown.message).toMatch(
          /^IdempotencyContext\.fetch\(\) needs an http: or https: URL, not one of another scheme\./,
        );
        expect(thrown.message).not.toMatch(/s3cr3t|alice|127\.0\.0\.1/);
        expect(fetched).toBe(0);
      },
    );
  });

  it('refuses a relative URL before anything is sent, without naming it (its query may hold a token)', async () => {
    script.call = (idempotency) =>
      idempotency.fetch('charge', '/charges?token=s3cr3t', {
        method: 'POST',
        body: '{"amount":1250}',
      });
    const thrown = await refusedAsMisconfigured('relative-url');
    expect(thrown.message).toMatch(
      /^IdempotencyContext\.fetch\(\) needs an absolute URL \(a scheme and a host\)/,
    );
    expect(thrown.message).not.toMatch(/s3cr3t|token/);
  });

  describe('a body that cannot be sent again as it is', () => {
    it.each<[string, () => unknown]>([
      ['a Node.js Readable', () => Readable.from([Buffer.from('{"a":1}')])],
      [
        'an async iterable',
        () =>
          (async function* () {
            yield new TextEncoder().encode('{"a":1}');
          })(),
      ],
      ['a ReadableStream', () => new Blob(['{"a":1}']).stream()],
      ['a FormData', () => new FormData()],
      ['a plain object', () => ({ a: 1 })],
    ])(
      'is a configuration error before anything is sent: %s',
      async (name, body) => {
        downstream.answer = (_request, response) =>
          response
            .writeHead(201, { 'content-type': 'application/json' })
            .end('{"id":"ch_4"}');
        script.call = async (idempotency) => {
          const response = await idempotency.fetch(
            'charge',
            `${downstream.url}/charges`,
            {
              method: 'POST',
              body: body() as string,
              duplex: 'half',
            } as IdempotentFetchInit,
          );
          return { status: response.status };
        };
        const thrown = await refusedAsMisconfigured(
          `body-${name.replaceAll(' ', '-')}`,
        );
        expect(thrown.message).toMatch(
          /^The body of the call of step "charge" cannot be sent again byte for byte/,
        );
      },
    );
  });

  describe('a time in milliseconds that is not a whole number', () => {
    it.each<[string, IdempotentFetchInit['idempotency']]>([
      ['timeoutMs', { timeoutMs: 2_000.5 }],
      ['retry.deadlineMs', { retry: { attempts: 3, deadlineMs: 2_000.5 } }],
    ])(
      'is taken as it is validated (%s): the call is made, once',
      async (name, idempotency) => {
        downstream.answer = (_request, response) =>
          response
            .writeHead(201, { 'content-type': 'application/json' })
            .end('{"id":"ch_5"}');
        script.call = async (context) => {
          const response = await context.fetch(
            'charge',
            `${downstream.url}/charges`,
            { method: 'POST', body: '{"amount":1250}', idempotency },
          );
          return { status: response.status, charge: await response.json() };
        };
        const done = await answer(
          send(target, '/call', { key: `fractional-${name}`, body: {} }),
        );
        expect(script.thrown).toBeUndefined();
        expect(done).toEqual({
          status: 201,
          contentType: expect.stringMatching(/^application\/json/),
          retryAfter: null,
          replayed: false,
          body: { status: 201, charge: { id: 'ch_5' } },
        });
        expect(downstream.received).toHaveLength(1);
      },
    );
  });

  describe('a replayed error', () => {
    it.each(['True', ' TRUE ', 'true'])(
      'is final whatever the case of its header (%p): a 502, called once',
      async (value) => {
        downstream.answer = (_request, response) =>
          response
            .writeHead(500, {
              'content-type': 'application/json',
              'idempotent-replayed': value,
            })
            .end('{"error":"stored failure"}');
        script.call = charge;
        const key = `replayed-${value.trim()}`;
        const refused = await answer(send(target, '/call', { key, body: {} }));
        expect(refused).toEqual({
          status: 502,
          contentType: expect.stringMatching(/^application\/problem\+json/),
          retryAfter: null,
          replayed: false,
          body: {
            type: 'urn:idempotency:downstream-refused',
            title: 'Downstream service refused the request',
            status: 502,
            detail: 'A service this request depends on answered 500.',
          },
        });
        expect(downstream.received).toHaveLength(1);
        expect(await storedAnswer(key)).toEqual([]);
      },
    );
  });

  describe('a replayed error under a renamed header', () => {
    beforeEach(() => {
      // A downstream whose module renamed its replay header.
      downstream.answer = (_request, response) =>
        response
          .writeHead(500, {
            'content-type': 'application/json',
            'idempotency-replayed': 'true',
          })
          .end('{"error":"stored failure"}');
    });

    it.each(['Idempotency-Replayed', 'idempotency-REPLAYED'])(
      'is final when the call names the header (%p, in any case): a 502, called once',
      async (replayHeaderName) => {
        script.call = async (idempotency) => {
          const response = await idempotency.fetch(
            'charge',
            `${downstream.url}/charges`,
            {
              method: 'POST',
              body: '{"amount":1250}',
              idempotency: { replayHeaderName },
            },
          );
          return { status: response.status };
        };
        const key = `renamed-${replayHeaderName}`;
        const refused = await answer(send(target, '/call', { key, body: {} }));
        expect(refused).toEqual(DOWNSTREAM_REFUSED_500);
        expect(downstream.received).toHaveLength(1);
        expect(await storedAnswer(key)).toEqual([]);
      },
    );

    it('is retried as a fresh 500 when the header is not named: a 503 after every attempt', async () => {
      script.call = charge;
      const refused = await answer(
        send(target, '/call', { key: 'renamed-unnamed', body: {} }),
      );
      expect(refused).toEqual(DOWNSTREAM_UNAVAILABLE);
      expect(downstream.received).toHaveLength(3);
      expect(new Set(downstream.received.map(({ key }) => key)).size).toBe(1);
      expect(await storedAnswer('renamed-unnamed')).toEqual([]);
    });
  });
});

/** What a request whose call got a final error answer gets. */
const DOWNSTREAM_REFUSED_500 = {
  status: 502,
  contentType: expect.stringMatching(/^application\/problem\+json/),
  retryAfter: null,
  replayed: false,
  body: {
    type: 'urn:idempotency:downstream-refused',
    title: 'Downstream service refused the request',
    status: 502,
    detail: 'A service this request depends on answered 500.',
  },
};

/** What a request whose call got no final answer in time gets. */
const DOWNSTREAM_UNAVAILABLE = {
  status: 503,
  contentType: expect.stringMatching(/^application\/problem\+json/),
  retryAfter: '1',
  replayed: false,
  body: {
    type: 'urn:idempotency:downstream-unavailable',
    title: 'Downstream service unavailable',
    status: 503,
    detail:
      'A service this request depends on did not answer in time. Retry it with the same idempotency key: it takes effect exactly once.',
  },
};

describe("IdempotencyContext.fetch(): the module's replay header name for its calls", () => {
  let downstream: WrittenDownstream;
  let target: TestApp;
  let script: CallScript;

  beforeAll(async () => {
    downstream = await new WrittenDownstream().start();
    downstream.answer = (_request, response) =>
      response
        .writeHead(500, {
          'content-type': 'application/json',
          'idempotency-replayed': 'true',
        })
        .end('{"error":"stored failure"}');
    target = await startTestApp({
      imports: [CallModule],
      idempotency: {
        outgoing: {
          replayHeaderName: 'Idempotency-Replayed',
          retry: { attempts: 3, baseDelayMs: 5, maxDelayMs: 20 },
          timeoutMs: 5_000,
        },
      },
    });
    script = target.app.get(CallScript);
  });
  afterAll(async () => {
    await target.close();
    await downstream.stop();
  });
  beforeEach(() => {
    downstream.received.length = 0;
  });

  /** The handler's call, with the call's own options. */
  const chargeWith =
    (idempotency: IdempotentFetchInit['idempotency']) =>
    async (context: IdempotencyContext) => {
      const response = await context.fetch(
        'charge',
        `${downstream.url}/charges`,
        { method: 'POST', body: '{"amount":1250}', idempotency },
      );
      return { status: response.status };
    };

  it('makes a replayed error under that name final: a 502, called once', async () => {
    script.call = chargeWith(undefined);
    const refused = await answer(
      send(target, '/call', { key: 'module-renamed', body: {} }),
    );
    expect(refused).toEqual(DOWNSTREAM_REFUSED_500);
    expect(downstream.received).toHaveLength(1);
  });

  it("gives way to a call's own name: the renamed header is then not read", async () => {
    script.call = chargeWith({ replayHeaderName: 'Idempotent-Replayed' });
    const refused = await answer(
      send(target, '/call', { key: 'module-renamed-call', body: {} }),
    );
    expect(refused).toEqual(DOWNSTREAM_UNAVAILABLE);
    expect(downstream.received).toHaveLength(3);
  });
});
