import { Readable } from 'node:stream';
import {
  IdempotentClient,
  RetriesExhaustedError,
  type IdempotentClientOptions,
  type IdempotentRequestInit,
  type RetryEvent,
} from '../../src/client/index.js';
import { StandInDownstream, type ScriptedAnswer } from './stand-in.js';

/*
 * The caller's client against a real HTTP server standing in for an
 * idempotent API, which answers each attempt of a key from a script: a
 * dropped connection, 409, 429, 503, other 5xx, no answer at all. Every
 * ordering comes from the script and the server's own counts, never from a
 * sleep; the only real waits are the ones under test (a timeout, a
 * Retry-After).
 */

const UUID =
  /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Retries at once, for the scenarios about which answers are retried. */
const QUICK: IdempotentClientOptions = {
  attempts: 20,
  baseDelayMs: 1,
  maxDelayMs: 5,
};

let standIn: StandInDownstream;

beforeEach(async () => {
  standIn = await new StandInDownstream().start();
});
afterEach(() => standIn.stop());

/** The operation `label`: its JSON body, the same for each of its attempts. */
function operation(
  label: string,
  init: IdempotentRequestInit = {},
): IdempotentRequestInit {
  return {
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ operation: label }),
    ...init,
  };
}

/** The rejection of `promise`, which must reject. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('Expected a rejection, got a result.');
}

/** What every attempt of `key` carried: one key, one method, one body. */
function expectSameRequest(key: string, body: string, attempts: number) {
  expect(
    standIn.attempts(key).map(({ key, method, contentType, body }) => ({
      key,
      method,
      contentType,
      body: body.toString(),
    })),
  ).toEqual(
    Array.from({ length: attempts }, () => ({
      key,
      method: 'POST',
      contentType: 'application/json',
      body,
    })),
  );
}

describe('one logical operation', () => {
  it('is retried on every transient answer under the same key, method and body, and takes effect once', async () => {
    standIn.defaultScript = [
      'drop',
      { status: 409, retryAfter: '0' },
      { status: 429 },
      { status: 503 },
      { status: 500 },
      { status: 502 },
      { status: 504 },
      'effect-drop',
    ];
    const retries: RetryEvent[] = [];
    const client = new IdempotentClient({
      ...QUICK,
      onRetry: (event) => retries.push(event),
    });
    const result = await client.send(
      `${standIn.url}/operations`,
      operation('transient'),
    );

    expect(result.key).toMatch(UUID);
    expect({
      status: result.response.status,
      replayed: result.replayed,
      attempts: result.attempts,
      body: await result.response.text(),
    }).toEqual({
      status: 201,
      replayed: true,
      attempts: 9,
      body: JSON.stringify({ effect: 'effect-1' }),
    });
    expectSameRequest(result.key, '{"operation":"transient"}', 9);
    expect([...standIn.effects.keys()]).toEqual([result.key]);
    expect(
      retries.map(({ key, attempt, status, error }) => ({
        key,
        attempt,
        status,
        error: (error as Error | undefined)?.name,
      })),
    ).toEqual(
      [undefined, 409, 429, 503, 500, 502, 504, undefined].map((status, i) => ({
        key: result.key,
        attempt: i + 1,
        status,
        error: status === undefined ? 'TypeError' : undefined,
      })),
    );
  });

  it('sends the key it is given, or the one in its headers, under the header name configured', async () => {
    const client = new IdempotentClient({ headerName: 'X-Request-Key' });
    const own = new StandInDownstream('x-request-key');
    await own.start();
    try {
      const given = await client.send(
        `${own.url}/operations`,
        operation('given', { key: 'order-42:pay' }),
      );
      const inHeaders = await client.send(`${own.url}/operations`, {
        headers: { 'x-request-key': 'order-43:pay' },
        body: 'plain',
      });
      expect([given.key, inHeaders.key]).toEqual([
        'order-42:pay',
        'order-43:pay',
      ]);
      expect(
        [...own.received.values()].flat().map(({ key, method, headers }) => ({
          key,
          method,
          idempotencyKey: headers['idempotency-key'],
        })),
      ).toEqual([
        { key: 'order-42:pay', method: 'POST', idempotencyKey: undefined },
        { key: 'order-43:pay', method: 'POST', idempotencyKey: undefined },
      ]);
      await expect(
        client.send(`${own.url}/operations`, {
          key: 'a',
          headers: { 'X-Request-Key': 'b' },
        }),
      ).rejects.toThrow(/given twice/);
      await expect(
        client.send(`${own.url}/operations`, { key: '' }),
      ).rejects.toThrow(/non-empty string/);
      expect(own.total).toBe(2);
    } finally {
      await own.stop();
    }
  });

  it('reports the key as its header carries it, and refuses one the header would carry empty', async () => {
    const client = new IdempotentClient(QUICK);
    const spaced = await client.send(
      `${standIn.url}/operations`,
      operation('spaced', { key: ' \tspaced-key ' }),
    );
    // HTTP drops the whitespace around a header's value: the key sent.
    expect([spaced.key, spaced.response.status, spaced.attempts]).toEqual([
      'spaced-key',
      201,
      1,
    ]);
    expect(standIn.attempts('spaced-key')).toHaveLength(1);
    // The same key, given in the headers and as `key`, is given once.
    const twice = await client.send(
      `${standIn.url}/operations`,
      operation('spaced', {
        key: 'spaced-key ',
        headers: { 'Idempotency-Key': 'spaced-key' },
      }),
    );
    expect([twice.key, twice.replayed]).toEqual(['spaced-key', true]);
    for (const blank of [' ', '\t \t']) {
      await expect(
        client.send(`${standIn.url}/operations`, { key: blank }),
      ).rejects.toThrow(/non-empty string/);
      await expect(
        client.send(`${standIn.url}/operations`, {
          headers: { 'Idempotency-Key': blank },
        }),
      ).rejects.toThrow(/non-empty string/);
    }
    expect(standIn.total).toBe(2);
  });

  it('gives each operation a key of its own', async () => {
    const client = new IdempotentClient(QUICK);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        client.send(`${standIn.url}/operations`, operation(`op-${i}`)),
      ),
    );
    const keys = results.map((result) => result.key);
    expect(new Set(keys).size).toBe(20);
    expect(standIn.effects.size).toBe(20);
    results.forEach((result, i) => {
      expect(result.key).toMatch(UUID);
      expectSameRequest(
        result.key,
        JSON.stringify({ operation: `op-${i}` }),
        1,
      );
    });
  });
});

describe('the waits between attempts', () => {
  it('follow Retry-After: 0 on a 409 instead of the jitter', async () => {
    standIn.defaultScript = [{ status: 409, retryAfter: '0' }];
    const delays: number[] = [];
    // The jitter would wait nearly a second.
    const client = new IdempotentClient({
      baseDelayMs: 1000,
      random: () => 0.999,
      onRetry: ({ delayMs }) => delays.push(delayMs),
    });
    const result = await client.send(`${standIn.url}/x`, operation('zero'));
    expect([result.response.status, result.attempts, delays]).toEqual([
      201,
      2,
      [0],
    ]);
  });

  it('follow Retry-After on a 429, for real', async () => {
    standIn.defaultScript = [{ status: 429, retryAfter: '1' }];
    const delays: number[] = [];
    const client = new IdempotentClient({
      random: () => 0,
      onRetry: ({ delayMs }) => delays.push(delayMs),
    });
    const result = await client.send(`${standIn.url}/x`, operation('one'));
    expect([result.response.status, result.attempts, delays]).toEqual([
      201,
      2,
      [1000],
    ]);
    const [first, second] = standIn.attempts(result.key);
    // Timers may fire a hair early by the server's clock, never much.
    expect(second.at - first.at).toBeGreaterThanOrEqual(990);
  });

  it('cap Retry-After of a 503 at maxDelayMs', async () => {
    standIn.defaultScript = [{ status: 503, retryAfter: '3600' }];
    const delays: number[] = [];
    const client = new IdempotentClient({
      maxDelayMs: 20,
      onRetry: ({ delayMs }) => delays.push(delayMs),
    });
    const result = await client.send(`${standIn.url}/x`, operation('capped'));
    expect([result.response.status, result.attempts, delays]).toEqual([
      201,
      2,
      [20],
    ]);
  });

  it('grow with full jitter when no Retry-After is given', async () => {
    standIn.defaultScript = [
      { status: 503 },
      { status: 503 },
      { status: 503 },
      { status: 503 },
    ];
    const delays: number[] = [];
    const client = new IdempotentClient({
      baseDelayMs: 10,
      maxDelayMs: 50,
      random: () => 0.5,
      onRetry: ({ delayMs }) => delays.push(delayMs),
    });
    const result = await client.send(`${standIn.url}/x`, operation('jitter'));
    expect([result.attempts, delays]).toEqual([5, [5, 10, 20, 25]]);
  });
});

describe('an answer that ends the operation at once', () => {
  it.each([400, 401, 404, 408, 410, 422, 501, 505])(
    'is a %p: returned as it is, after one attempt',
    async (status) => {
      standIn.defaultScript = [{ status, retryAfter: '0' }];
      const client = new IdempotentClient(QUICK);
      const result = await client.send(`${standIn.url}/x`, operation('stop'));
      expect({
        status: result.response.status,
        replayed: result.replayed,
        attempts: result.attempts,
        body: (await result.response.json()) as unknown,
      }).toEqual({
        status,
        replayed: false,
        attempts: 1,
        body: { status, key: result.key },
      });
      expect(standIn.attempts(result.key)).toHaveLength(1);
      expect(standIn.effects.size).toBe(0);
    },
  );

  it.each([409, 429, 500, 503])(
    'is a replayed %p: the stored final outcome, never retried',
    async (status) => {
      standIn.defaultScript = [{ status, replayed: true }];
      const client = new IdempotentClient(QUICK);
      const result = await client.send(`${standIn.url}/x`, operation('done'));
      expect({
        status: result.response.status,
        replayed: result.replayed,
        attempts: result.attempts,
      }).toEqual({ status, replayed: true, attempts: 1 });
      expect(standIn.attempts(result.key)).toHaveLength(1);
    },
  );
});

describe('a replay under a header the server renamed', () => {
  let renamed: StandInDownstream;

  beforeEach(async () => {
    renamed = await new StandInDownstream(
      'idempotency-key',
      'idempotency-replayed',
    ).start();
    renamed.defaultScript = [500, 500, 500].map((status) => ({
      status,
      replayed: true,
    }));
  });
  afterEach(() => renamed.stop());

  it.each(['Idempotency-Replayed', 'IDEMPOTENCY-replayed'])(
    'is the stored final outcome when replayHeaderName names it (%p, in any case): returned after one attempt',
    async (replayHeaderName) => {
      const retries: RetryEvent[] = [];
      const client = new IdempotentClient({
        ...QUICK,
        attempts: 3,
        replayHeaderName,
        onRetry: (event) => retries.push(event),
      });
      const result = await client.send(`${renamed.url}/x`, operation('done'));
      expect({
        status: result.response.status,
        replayed: result.replayed,
        attempts: result.attempts,
        body: (await result.response.json()) as unknown,
      }).toEqual({
        status: 500,
        replayed: true,
        attempts: 1,
        body: { status: 500, key: result.key },
      });
      expect(retries).toEqual([]);
      expect(renamed.attempts(result.key)).toHaveLength(1);
    },
  );

  it('is taken for a fresh 500 without the option: retried until the attempts run out', async () => {
    const client = new IdempotentClient({ ...QUICK, attempts: 3 });
    const error = await rejectionOf(
      client.send(`${renamed.url}/x`, operation('unnamed')),
    );
    expect(error).toBeInstanceOf(RetriesExhaustedError);
    const { key, reason, status, attempts } = error as RetriesExhaustedError;
    expect({ reason, status, attempts }).toEqual({
      reason: 'attempts',
      status: 500,
      attempts: 3,
    });
    expect(renamed.attempts(key).map((attempt) => attempt.key)).toEqual([
      key,
      key,
      key,
    ]);
  });

  it.each(['', 'no spaces', 'caf\u00e9'])(
    'refuses the name %p at construction',
    (replayHeaderName) => {
      let thrown: unknown;
      try {
        new IdempotentClient({ replayHeaderName });
      } catch (error) {
        thrown = error;
      }
      // By name: the platform's TypeError is of another realm than the test's.
      expect((thrown as Error | undefined)?.name).toBe('TypeError');
    },
  );
});

describe('an attempt without an answer', () => {
  it.each([
    ['hang', false],
    ['effect-hang', true],
  ] as const)(
    'is abandoned at attemptTimeoutMs and retried (%s: replayed %p)',
    async (answer, replayed) => {
      standIn.defaultScript = [answer];
      const retries: RetryEvent[] = [];
      const client = new IdempotentClient({
        ...QUICK,
        attemptTimeoutMs: 500,
        onRetry: (event) => retries.push(event),
      });
      const result = await client.send(`${standIn.url}/x`, operation(answer));
      expect({
        status: result.response.status,
        replayed: result.replayed,
        attempts: result.attempts,
      }).toEqual({ status: 201, replayed, attempts: 2 });
      expectSameRequest(result.key, JSON.stringify({ operation: answer }), 2);
      expect(standIn.effects.size).toBe(1);
      expect(retries.map(({ error }) => (error as Error).name)).toEqual([
        'TimeoutError',
      ]);
    },
  );
});

describe('a request that fetch cannot build', () => {
  it.each<[string, (url: string) => [string, IdempotentRequestInit]]>([
    [
      'a URL with credentials',
      (url) => [url.replace('http://', 'http://alice:s3cr3t@') + '/x', {}],
    ],
    ['a URL that does not parse', () => ['api.example.com/x?token=s3cr3t', {}]],
    ['a GET with a body', (url) => [`${url}/x`, { method: 'GET', body: '{}' }]],
    [
      'an invalid header value',
      (url) => [`${url}/x`, { headers: { authorization: 'Bearer s3\ncr3t' } }],
    ],
    // Built by fetch (Node.js), then refused at every attempt, unsent.
    [
      'an Expect header',
      (url) => [
        `${url}/x`,
        operation('expect', { headers: { expect: '100-continue' } }),
      ],
    ],
    [
      'a Transfer-Encoding header',
      (url) => [
        `${url}/x`,
        operation('chunked', { headers: { 'transfer-encoding': 'chunked' } }),
      ],
    ],
    [
      "a Content-Length that is not the body's",
      (url) => [
        `${url}/x`,
        operation('length', { headers: { 'content-length': '999' } }),
      ],
    ],
  ])(
    'rejects with the TypeError of fetch at once, nothing sent: %s',
    async (_name, make) => {
      const retries: RetryEvent[] = [];
      const client = new IdempotentClient({
        ...QUICK,
        onRetry: (event) => retries.push(event),
      });
      const [url, init] = make(standIn.url);
      const error = await rejectionOf(client.send(url, init));
      // By name: the platform's TypeError is of another realm than the test's.
      expect((error as Error).name).toBe('TypeError');
      expect(retries).toEqual([]);
      expect(standIn.total).toBe(0);
    },
  );
});

describe('a URL whose scheme is not http: or https:', () => {
  it.each<[string, (url: string) => string]>([
    ['ftp:', (url) => `${url.replace('http://', 'ftp://')}/x?token=s3cr3t`],
    ['file:', () => 'file:///tmp/s3cr3t/x'],
    ['data:', () => 'data:application/json,{"s3cr3t":true}'],
    ['a user taken for a scheme', (url) => `alice:s3cr3t@${url.slice(7)}/x`],
  ])(
    'rejects with a TypeError at once, nothing sent: %s',
    async (_name, make) => {
      const retries: RetryEvent[] = [];
      let fetched = 0;
      const client = new IdempotentClient({
        ...QUICK,
        onRetry: (event) => retries.push(event),
        fetch: (input, init) => {
          fetched += 1;
          return fetch(input, init);
        },
      });
      const error = await rejectionOf(
        client.send(make(standIn.url), operation('scheme')),
      );
      expect(error).toBeInstanceOf(TypeError);
      expect((error as Error).message).toBe(
        'The URL must be an http: or https: one, not one of another scheme.',
      );
      expect(fetched).toBe(0);
      expect(retries).toEqual([]);
      expect(standIn.total).toBe(0);
    },
  );
});

describe('the bounds', () => {
  const always = (answer: ScriptedAnswer) =>
    Array.from({ length: 100 }, () => answer);

  it('stop at the number of attempts, with the last response', async () => {
    standIn.defaultScript = always({ status: 503 });
    const client = new IdempotentClient({ ...QUICK, attempts: 3 });
    const error = await rejectionOf(
      client.send(`${standIn.url}/x`, operation('busy', { key: 'busy-1' })),
    );
    expect(error).toBeInstanceOf(RetriesExhaustedError);
    const exhausted = error as RetriesExhaustedError;
    expect({
      name: exhausted.name,
      reason: exhausted.reason,
      key: exhausted.key,
      status: exhausted.status,
      attempts: exhausted.attempts,
      message: exhausted.message,
      body: (await exhausted.response?.json()) as unknown,
    }).toEqual({
      name: 'RetriesExhaustedError',
      reason: 'attempts',
      key: 'busy-1',
      status: 503,
      attempts: 3,
      message:
        'Gave up after 3 attempts (no attempt left): the last attempt got 503.',
      body: { status: 503, key: 'busy-1' },
    });
    expectSameRequest('busy-1', '{"operation":"busy"}', 3);
  });

  it('stop at the number of attempts on network failures, without a status', async () => {
    standIn.defaultScript = always('drop');
    const client = new IdempotentClient({ ...QUICK, attempts: 2 });
    const error = (await rejectionOf(
      client.send(`${standIn.url}/x`, operation('down', { key: 'down-1' })),
    )) as RetriesExhaustedError;
    expect({
      reason: error.reason,
      status: error.status,
      response: error.response,
      attempts: error.attempts,
      cause: (error.cause as Error).name,
    }).toEqual({
      reason: 'attempts',
      status: undefined,
      response: undefined,
      attempts: 2,
      cause: 'TypeError',
    });
    // The error's name and its cause's code, never its message.
    expect(error.message).toMatch(
      /^Gave up after 2 attempts \(no attempt left\): the last attempt got no response \(TypeError, (UND_ERR_SOCKET|ECONNRESET)\)\.$/,
    );
    expect(standIn.attempts('down-1')).toHaveLength(2);
  });

  it('keep the message of the last error out of theirs: it may hold the URL', async () => {
    // Deno's network error, which names the URL, through a `fetch` of the
    // caller's own that sends nothing.
    const failure = new TypeError(
      'error sending request for url (https://alice:s3cr3t@api.example.com/x?token=tok_s3cr3t): connection refused',
    );
    const client = new IdempotentClient({
      ...QUICK,
      attempts: 2,
      fetch: () => Promise.reject(failure),
    });
    const error = (await rejectionOf(
      client.send(
        'https://api.example.com/x?token=tok_s3cr3t',
        operation('deno', { key: 'key-s3cr3t' }),
      ),
    )) as RetriesExhaustedError;
    expect({
      name: error.name,
      message: error.message,
      cause: error.cause,
      key: error.key,
    }).toEqual({
      name: 'RetriesExhaustedError',
      message:
        'Gave up after 2 attempts (no attempt left): the last attempt got no response (TypeError).',
      cause: failure,
      key: 'key-s3cr3t',
    });
    expect(String(error)).not.toMatch(/s3cr3t/);
  });

  it('stop at the deadline, counted from the first attempt', async () => {
    standIn.defaultScript = always({ status: 503 });
    const deadlineMs = 400;
    const client = new IdempotentClient({
      attempts: 100,
      baseDelayMs: 100,
      maxDelayMs: 100,
      random: () => 0.999,
      deadlineMs,
    });
    const started = performance.now();
    const error = (await rejectionOf(
      client.send(`${standIn.url}/x`, operation('late', { key: 'late-1' })),
    )) as RetriesExhaustedError;
    const elapsed = performance.now() - started;
    expect(error.reason).toBe('deadline');
    // The last answer, a 503, when the deadline came in a wait; none when it
    // cut an attempt short (on a busy machine, an attempt to the stand-in
    // can outlast the time left).
    expect([503, undefined]).toContain(error.status);
    // It gives up rather than wait past the deadline (without it, 100
    // attempts would take some 10 s); a margin for a timer that fires late
    // on a busy machine.
    expect(elapsed).toBeLessThan(deadlineMs + 1000);
    // About 100 ms between attempts: 4 fit in 400 ms. A timer armed on a
    // busy machine counts from the event loop's cached clock and can fire a
    // few milliseconds early by the wall clock (a run saw 5), so the bound
    // is what a wait of half the delay allows; an attempt without its wait
    // would make dozens.
    expect(error.attempts).toBeGreaterThanOrEqual(2);
    expect(error.attempts).toBeLessThanOrEqual(1 + deadlineMs / 50);
    expect(standIn.attempts('late-1')).toHaveLength(error.attempts);
  });

  it('stop at once when the wait asked for runs past the deadline', async () => {
    standIn.defaultScript = always({ status: 503, retryAfter: '10' });
    const client = new IdempotentClient({
      maxDelayMs: 10_000,
      deadlineMs: 5000,
    });
    const started = performance.now();
    const error = (await rejectionOf(
      client.send(`${standIn.url}/x`, operation('later', { key: 'later-1' })),
    )) as RetriesExhaustedError;
    expect({
      reason: error.reason,
      status: error.status,
      attempts: error.attempts,
    }).toEqual({ reason: 'deadline', status: 503, attempts: 1 });
    expect(performance.now() - started).toBeLessThan(5000);
  });

  it('cut an attempt short at the deadline', async () => {
    standIn.defaultScript = ['hang'];
    const client = new IdempotentClient({
      deadlineMs: 300,
      attemptTimeoutMs: 60_000,
    });
    const started = performance.now();
    const error = (await rejectionOf(
      client.send(`${standIn.url}/x`, operation('hung', { key: 'hung-1' })),
    )) as RetriesExhaustedError;
    const elapsed = performance.now() - started;
    expect({
      reason: error.reason,
      status: error.status,
      attempts: error.attempts,
      cause: (error.cause as Error).name,
      message: error.message,
    }).toEqual({
      reason: 'deadline',
      status: undefined,
      attempts: 1,
      cause: 'TimeoutError',
      message:
        'Gave up after 1 attempt (deadline reached): the last attempt got no response (TimeoutError).',
    });
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(5000);
    expect(standIn.attempts('hung-1')).toHaveLength(1);
  });
});

describe("the caller's AbortSignal", () => {
  const reason = new Error('the user left the page');

  it('already aborted: nothing is sent', async () => {
    const client = new IdempotentClient(QUICK);
    await expect(
      client.send(
        `${standIn.url}/x`,
        operation('never', { signal: AbortSignal.abort(reason) }),
      ),
    ).rejects.toBe(reason);
    expect(standIn.total).toBe(0);
  });

  it('stops an attempt in flight, with its reason, and no other attempt follows', async () => {
    standIn.defaultScript = ['hang'];
    const controller = new AbortController();
    const client = new IdempotentClient(QUICK);
    const sent = client.send(
      `${standIn.url}/x`,
      operation('stopped', { key: 'stopped-1', signal: controller.signal }),
    );
    await standIn.arrived('stopped-1');
    controller.abort(reason);
    await expect(sent).rejects.toBe(reason);
    expect(standIn.attempts('stopped-1')).toHaveLength(1);
  });

  it('stops a wait between attempts at once', async () => {
    standIn.defaultScript = [{ status: 503, retryAfter: '60' }];
    const controller = new AbortController();
    let retried!: () => void;
    const waiting = new Promise<void>((resolve) => (retried = resolve));
    const client = new IdempotentClient({
      maxDelayMs: 60_000,
      deadlineMs: 120_000,
      onRetry: () => retried(),
    });
    const started = performance.now();
    const sent = client.send(
      `${standIn.url}/x`,
      operation('waiting', { key: 'waiting-1', signal: controller.signal }),
    );
    await waiting;
    controller.abort(reason);
    await expect(sent).rejects.toBe(reason);
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(standIn.attempts('waiting-1')).toHaveLength(1);
  });

  it('stops the body of the response it returned', async () => {
    standIn.defaultScript = ['stream'];
    const controller = new AbortController();
    const client = new IdempotentClient(QUICK);
    const result = await client.send(
      `${standIn.url}/x`,
      operation('streamed', { signal: controller.signal }),
    );
    const reader = result.response.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe('first chunk');
    controller.abort(reason);
    await expect(reader.read()).rejects.toBe(reason);
  });
});

describe('the body', () => {
  const bytes = new TextEncoder().encode('{"operation":"bytes"}');

  it.each([
    ['a Uint8Array', () => bytes, 'application/json'],
    ['an ArrayBuffer', () => bytes.slice().buffer, 'application/json'],
    [
      'a Blob',
      () => new Blob([bytes], { type: 'application/json' }),
      'application/json',
    ],
    [
      'URLSearchParams',
      () => new URLSearchParams({ operation: 'form' }),
      'application/x-www-form-urlencoded;charset=UTF-8',
    ],
  ])('is sent again byte for byte when it is %s', async (_kind, body, type) => {
    standIn.defaultScript = ['drop', 'effect-drop'];
    const client = new IdempotentClient(QUICK);
    const init = body();
    const result = await client.send(`${standIn.url}/x`, {
      body: init,
      headers:
        init instanceof Uint8Array || init instanceof ArrayBuffer
          ? { 'content-type': type }
          : {},
    });
    expect([result.response.status, result.replayed, result.attempts]).toEqual([
      201,
      true,
      3,
    ]);
    const attempts = standIn.attempts(result.key);
    const expected =
      init instanceof URLSearchParams
        ? 'operation=form'
        : '{"operation":"bytes"}';
    expect(
      attempts.map(({ body, contentType }) => [body.toString(), contentType]),
    ).toEqual([
      [expected, type],
      [expected, type],
      [expected, type],
    ]);
  });

  it.each([
    ['a FormData', () => new FormData()],
    ['a stream', () => new Blob(['x']).stream()],
    ['a Node.js Readable', () => Readable.from([Buffer.from('x')])],
    [
      'an async iterable',
      () =>
        (async function* () {
          yield new TextEncoder().encode('x');
        })(),
    ],
  ])(
    'is refused when it is %s, before anything is sent',
    async (_kind, body) => {
      const client = new IdempotentClient(QUICK);
      await expect(
        client.send(`${standIn.url}/x`, {
          body: body() as unknown as string,
        }),
      ).rejects.toThrow(/can be sent again/);
      expect(standIn.total).toBe(0);
    },
  );
});
