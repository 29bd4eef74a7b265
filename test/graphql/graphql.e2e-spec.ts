import { createHash, randomBytes } from 'node:crypto';
import { Barrier, untilWaiting } from '../utils/barrier.js';
import { busyConnections } from '../utils/statement-counter.js';
import { idleInTransaction } from '../utils/sessions.js';
import {
  send,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import {
  Gate,
  describeGraphqlServers,
  graphqlTestModule,
  type GraphqlDriver,
} from './graphql.module.js';

interface GraphqlAnswer {
  readonly status: number;
  readonly body: {
    data?: Record<string, unknown> | null;
    errors?: Array<{
      message: string;
      path?: string[];
      extensions?: Record<string, unknown>;
    }>;
  };
}

/**
 * A request left running while the test goes on: if the test fails first,
 * its end (the app closing under it) is not reported as another failure.
 */
function inFlight<T>(request: Promise<T>): Promise<T> {
  request.catch(() => undefined);
  return request;
}

/** The problem details every refusal carries in `extensions`. */
function refusal(
  code: string,
  status: number,
  type: string,
  extra: Record<string, unknown> = {},
) {
  return {
    code,
    status,
    type: `urn:idempotency:${type}`,
    title: expect.any(String),
    detail: expect.any(String),
    ...extra,
  };
}

/** The suite of one GraphQL server on one HTTP platform. */
function graphqlMutations(driver: GraphqlDriver, platform: Platform): void {
  let target: TestApp;
  let gate: Gate;

  beforeAll(async () => {
    target = await startTestApp({
      platform,
      imports: [await graphqlTestModule(driver)],
      idempotency: { gc: false },
    });
    gate = target.app.get(Gate);
  });
  afterAll(() => target.close());
  beforeEach(() => {
    gate.barrier = new Barrier();
    gate.runs = {};
    gate.failures = 0;
  });

  async function graphql(
    query: string,
    init: { key?: string; variables?: Record<string, unknown> } = {},
  ): Promise<GraphqlAnswer> {
    const { key, variables } = init;
    const response = await send(target, '/graphql', {
      key,
      body: { query, variables },
    });
    return {
      status: response.status,
      body: (await response.json()) as GraphqlAnswer['body'],
    };
  }

  const rows = async (reference: string) =>
    (
      await target.db.query('SELECT id FROM orders WHERE reference = $1', [
        reference,
      ])
    ).length;

  const records = (pattern: string) =>
    target.db.query<{
      key: string;
      status: string;
      method: string;
      path: string;
    }>(
      `SELECT key, status, method, path FROM idempotency_records
       WHERE key LIKE $1 ORDER BY key`,
      [pattern],
    );

  it('a mutation sent twice with the same key runs once: the duplicate gets the same data', async () => {
    const document = `mutation { placeOrder(reference: "${driver}-${platform}-once", note: "gift") { id reference note } }`;
    const first = await graphql(document, { key: 'once-1' });
    expect(first).toEqual({
      status: 200,
      body: {
        data: {
          placeOrder: {
            id: expect.any(Number),
            reference: `${driver}-${platform}-once`,
            note: 'gift',
          },
        },
      },
    });
    const duplicate = await graphql(document, { key: 'once-1' });
    expect(duplicate).toEqual(first);
    expect(gate.runs).toEqual({ placeOrder: 1 });
    expect(await rows(`${driver}-${platform}-once`)).toBe(1);
    expect(await records('once-1%')).toEqual([
      {
        key: 'once-1#placeOrder',
        status: 'completed',
        method: 'MUTATION',
        path: 'Mutation.placeOrder',
      },
    ]);
  });

  it('a duplicate of a mutation whose result has dates gets the same data, dates as they were sent', async () => {
    const reference = `${driver}-${platform}-dated`;
    const document = `mutation { placeDatedOrder(reference: "${reference}") { id placedAt reminders order { reference } } }`;
    const first = await graphql(document, { key: 'dated-1' });
    expect(first).toEqual({
      status: 200,
      body: {
        data: {
          placeDatedOrder: {
            id: expect.any(Number),
            placedAt: '2026-11-30T12:00:00.000Z',
            reminders: ['2026-12-01T00:00:00.000Z', '2026-12-02T00:00:00.000Z'],
            order: { reference },
          },
        },
      },
    });
    expect(await graphql(document, { key: 'dated-1' })).toEqual(first);
    expect(gate.runs).toEqual({ placeDatedOrder: 1 });
  });

  it('a duplicate of a mutation whose date fields read properties of other names gets the same data, dates as they were sent', async () => {
    const reference = `${driver}-${platform}-shipped`;
    const document = `mutation { shipOrder(reference: "${reference}") { id shippedAt deliveryWindow } }`;
    const first = await graphql(document, { key: 'shipped-1' });
    expect(first).toEqual({
      status: 200,
      body: {
        data: {
          shipOrder: {
            id: expect.any(Number),
            shippedAt: '2026-11-30T09:30:00.000Z',
            deliveryWindow: [
              '2026-12-01T08:00:00.000Z',
              '2026-12-01T12:00:00.000Z',
            ],
          },
        },
      },
    });
    expect(await graphql(document, { key: 'shipped-1' })).toEqual(first);
    expect(gate.runs).toEqual({ shipOrder: 1 });
    expect(await rows(reference)).toBe(1);
  });

  it('a mutation whose result has a BigInt scalar answers its digits, and its duplicate gets them back without running it', async () => {
    const reference = `${driver}-${platform}-ledger`;
    const document = `mutation { bookLedgerEntry(reference: "${reference}") { id cents } }`;
    const first = await graphql(document, { key: 'ledger-1' });
    expect(first).toEqual({
      status: 200,
      body: {
        data: {
          bookLedgerEntry: {
            id: expect.any(Number),
            cents: '12345678901234567890',
          },
        },
      },
    });
    expect(await graphql(document, { key: 'ledger-1' })).toEqual(first);
    expect(gate.runs).toEqual({ bookLedgerEntry: 1 });
    expect(await rows(reference)).toBe(1);
  });

  it('a document with two decorated mutations (aliased) keeps one record per field: its retry replays both and writes nothing', async () => {
    const reference = `${driver}-${platform}-pair`;
    const document = `mutation {
      first: placeOrder(reference: "${reference}-a") { id reference }
      second: placeOrder(reference: "${reference}-b") { id reference }
      placeOrderByReference(reference: "${reference}-c") { id reference }
    }`;
    const first = await graphql(document, { key: 'pair-1' });
    expect(first).toEqual({
      status: 200,
      body: {
        data: {
          first: { id: expect.any(Number), reference: `${reference}-a` },
          second: { id: expect.any(Number), reference: `${reference}-b` },
          placeOrderByReference: {
            id: expect.any(Number),
            reference: `${reference}-c`,
          },
        },
      },
    });
    const retry = await graphql(document, { key: 'pair-1' });
    expect(retry).toEqual(first);
    expect(gate.runs).toEqual({ placeOrder: 2, placeOrderByReference: 1 });
    expect(await rows(`${reference}-a`)).toBe(1);
    expect(await rows(`${reference}-b`)).toBe(1);
    expect(await rows(`${reference}-c`)).toBe(1);
    expect(await records('pair-1%')).toEqual([
      {
        key: 'pair-1#first',
        status: 'completed',
        method: 'MUTATION',
        path: 'Mutation.placeOrder',
      },
      {
        key: 'pair-1#second',
        status: 'completed',
        method: 'MUTATION',
        path: 'Mutation.placeOrder',
      },
    ]);
    // The `key` option keyed the third field by its argument.
    expect(await records(`${reference}-c%`)).toEqual([
      {
        key: `${reference}-c#placeOrderByReference`,
        status: 'completed',
        method: 'MUTATION',
        path: 'Mutation.placeOrderByReference',
      },
    ]);
  });

  it('a mutation under an alias of kilobytes runs and replays: its record keys the alias by its digest, within the index', async () => {
    const reference = `${driver}-${platform}-long-alias`;
    // Random letters: an index entry PostgreSQL cannot compress.
    const alias = `a${[...randomBytes(8999)].map((byte) => 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'[byte % 52]).join('')}`;
    const document = `mutation { ${alias}: placeOrder(reference: "${reference}") { reference } }`;
    const first = await graphql(document, { key: 'long-alias-1' });
    expect(first).toEqual({
      status: 200,
      body: { data: { [alias]: { reference } } },
    });
    expect(await graphql(document, { key: 'long-alias-1' })).toEqual(first);
    expect(gate.runs).toEqual({ placeOrder: 1 });
    expect(await rows(reference)).toBe(1);
    expect(await records('long-alias-1%')).toEqual([
      {
        key: `long-alias-1#~${createHash('sha256').update(`#${alias}`).digest('hex')}`,
        status: 'completed',
        method: 'MUTATION',
        path: 'Mutation.placeOrder',
      },
    ]);
  });

  it('the arguments count, not how the document spells them: variables and argument order replay', async () => {
    const reference = `${driver}-${platform}-spelling`;
    const first = await graphql(
      `mutation { placeOrder(reference: "${reference}", note: "n") { id reference note } }`,
      { key: 'spelling-1' },
    );
    const withVariables = await graphql(
      `
        mutation Place($note: String, $reference: String!) {
          placeOrder(note: $note, reference: $reference) {
            id
            reference
            note
          }
        }
      `,
      { key: 'spelling-1', variables: { note: 'n', reference } },
    );
    expect(withVariables).toEqual(first);
    expect(gate.runs).toEqual({ placeOrder: 1 });
    expect(await rows(reference)).toBe(1);
  });

  it('the same key with other arguments is refused with IDEMPOTENCY_KEY_REUSED (422) and does not run', async () => {
    const reference = `${driver}-${platform}-reused`;
    await graphql(`mutation { placeOrder(reference: "${reference}") { id } }`, {
      key: 'reused-1',
    });
    const other = await graphql(
      `mutation { placeOrder(reference: "${reference}", note: "changed") { id } }`,
      { key: 'reused-1' },
    );
    expect(other).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          expect.objectContaining({
            message:
              'This idempotency key was already used for a different request. Use a new key for a new request.',
            path: ['placeOrder'],
            extensions: refusal('IDEMPOTENCY_KEY_REUSED', 422, 'key-reused', {
              key: 'reused-1#placeOrder',
            }),
          }),
        ],
      },
    });
    expect(gate.runs).toEqual({ placeOrder: 1 });
    expect(await rows(reference)).toBe(1);
  });

  it("-0 and 0 are other arguments, as over REST: the second is refused (422), not answered with the first one's result", async () => {
    const negative = await graphql('mutation { signOf(value: -0.0) }', {
      key: 'sign-1',
    });
    expect(negative).toEqual({
      status: 200,
      body: { data: { signOf: 'negative zero' } },
    });
    const zero = await graphql('mutation { signOf(value: 0) }', {
      key: 'sign-1',
    });
    expect(zero.body).toMatchObject({
      data: null,
      errors: [
        expect.objectContaining({
          extensions: expect.objectContaining({
            code: 'IDEMPOTENCY_KEY_REUSED',
          }),
        }),
      ],
    });
    expect(gate.runs).toEqual({ signOf: 1 });
  });

  it.each([
    ['missing', undefined, 'IDEMPOTENCY_KEY_MISSING', 'missing-key'],
    ['malformed', 'has space', 'IDEMPOTENCY_KEY_INVALID', 'invalid-key'],
    ['too long', 'k'.repeat(256), 'IDEMPOTENCY_KEY_INVALID', 'invalid-key'],
  ])(
    'a %s key is refused (400): no run, no row, no record',
    async (what, key, code, type) => {
      const reference = `${driver}-${platform}-${what}`;
      const [{ before }] = await target.db.query<{ before: number }>(
        'SELECT count(*)::int AS before FROM idempotency_records',
      );
      const answer = await graphql(
        `mutation { placeOrder(reference: "${reference}") { id } }`,
        { key },
      );
      expect(answer).toEqual({
        status: 200,
        body: {
          data: null,
          errors: [
            expect.objectContaining({
              path: ['placeOrder'],
              extensions: refusal(code, 400, type),
            }),
          ],
        },
      });
      expect(gate.runs).toEqual({});
      expect(await rows(reference)).toBe(0);
      expect(
        await target.db.query(
          'SELECT count(*)::int AS after FROM idempotency_records',
        ),
      ).toEqual([{ after: before }]);
    },
  );

  it("a key that the `key` option derives and that breaks the rules is refused (400) as the option's, not the header's: no run, no row", async () => {
    const reference = `${driver} ${platform} derived`;
    const answer = await graphql(
      `mutation { placeOrderByReference(reference: "${reference}") { id } }`,
      { key: 'derived-1' },
    );
    const detail =
      'The key of the "key" option is invalid: it has an invalid format.';
    expect(answer).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          expect.objectContaining({
            message: detail,
            path: ['placeOrderByReference'],
            extensions: refusal('IDEMPOTENCY_KEY_INVALID', 400, 'invalid-key', {
              detail,
            }),
          }),
        ],
      },
    });
    expect(gate.runs).toEqual({});
    expect(await rows(reference)).toBe(0);
  });

  it('a concurrent duplicate gets IDEMPOTENCY_CONFLICT (409, retryAfter) while the first holds no connection; a retry replays', async () => {
    const reference = `${driver}-${platform}-conflict`;
    const document = `mutation { placeOrderGated(reference: "${reference}") { id reference } }`;
    const first = inFlight(graphql(document, { key: 'conflict-1' }));
    await gate.barrier.reached(1);
    // Claimed, and waiting before its first statement: nothing is held.
    expect(busyConnections(target.dataSource)).toBe(0);
    expect(await idleInTransaction(target.db)).toEqual([]);
    const duplicate = await graphql(document, { key: 'conflict-1' });
    expect(duplicate).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          expect.objectContaining({
            message:
              'A request with this idempotency key is still being processed. Retry later to get its response.',
            path: ['placeOrderGated'],
            extensions: refusal(
              'IDEMPOTENCY_CONFLICT',
              409,
              'request-in-progress',
              { retryAfter: 1, key: 'conflict-1#placeOrderGated' },
            ),
          }),
        ],
      },
    });
    gate.barrier.open();
    const done = await first;
    expect(done.body.data).toEqual({
      placeOrderGated: { id: expect.any(Number), reference },
    });
    expect(await graphql(document, { key: 'conflict-1' })).toEqual(done);
    expect(gate.runs).toEqual({ placeOrderGated: 1 });
    expect(await rows(reference)).toBe(1);
  });

  it("with concurrency: 'wait', a concurrent duplicate waits and gets the first one's data", async () => {
    const reference = `${driver}-${platform}-wait`;
    const document = `mutation { placeOrderWaited(reference: "${reference}") { id reference } }`;
    const first = inFlight(graphql(document, { key: 'wait-1' }));
    await gate.barrier.reached(1);
    const duplicate = inFlight(graphql(document, { key: 'wait-1' }));
    await untilWaiting(target.db, 'wait-1#placeOrderWaited');
    gate.barrier.open();
    const [a, b] = await Promise.all([first, duplicate]);
    expect(a.body.data).toEqual({
      placeOrderWaited: { id: expect.any(Number), reference },
    });
    expect(b).toEqual(a);
    expect(gate.runs).toEqual({ placeOrderWaited: 1 });
    expect(await rows(reference)).toBe(1);
  });

  it("the resolver's writes and its record commit together, in one transaction", async () => {
    const reference = `${driver}-${platform}-held`;
    const answer = inFlight(
      graphql(
        `mutation { placeOrderHeld(reference: "${reference}") { id reference } }`,
        { key: 'held-1' },
      ),
    );
    await gate.barrier.reached(1);
    // Written, not committed: the row is not visible, the key only claimed,
    // and one session (the resolver's) sits inside a transaction.
    expect(await rows(reference)).toBe(0);
    expect(await records('held-1%')).toEqual([
      expect.objectContaining({
        key: 'held-1#placeOrderHeld',
        status: 'in_progress',
      }),
    ]);
    expect(await idleInTransaction(target.db)).toHaveLength(1);
    gate.barrier.open();
    expect((await answer).body.data).toEqual({
      placeOrderHeld: { id: expect.any(Number), reference },
    });
    expect(await rows(reference)).toBe(1);
    expect(await records('held-1%')).toEqual([
      expect.objectContaining({
        key: 'held-1#placeOrderHeld',
        status: 'completed',
      }),
    ]);
    expect(await idleInTransaction(target.db)).toEqual([]);
  });

  it('a mutation that writes then throws keeps no row and no record: the retry runs again', async () => {
    const reference = `${driver}-${platform}-failing`;
    const document = `mutation { placeOrderFailing(reference: "${reference}") { id reference } }`;
    gate.failures = 1;
    const failed = await graphql(document, { key: 'failing-1' });
    expect(failed).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          expect.objectContaining({
            message: 'The warehouse is closed',
            path: ['placeOrderFailing'],
          }),
        ],
      },
    });
    expect(await rows(reference)).toBe(0);
    expect(await records('failing-1%')).toEqual([]);
    const retry = await graphql(document, { key: 'failing-1' });
    expect(retry.body).toEqual({
      data: { placeOrderFailing: { id: expect.any(Number), reference } },
    });
    expect(gate.runs).toEqual({ placeOrderFailing: 2 });
    expect(await rows(reference)).toBe(1);
  });

  it.each([
    [
      'an HttpException',
      'refused',
      // Apollo's driver turns an HttpException into its own code; Mercurius
      // answers with its message only.
      driver === 'apollo'
        ? {
            extensions: {
              code: 'BAD_REQUEST',
              originalError: {
                message: expect.stringMatching(/^Out of stock: /),
                error: 'Bad Request',
                statusCode: 400,
              },
            },
          }
        : {},
    ],
    [
      'a GraphQLError',
      'sold-out',
      {
        // Apollo takes `extensions.http` for itself; the rest is kept.
        extensions: {
          code: 'SOLD_OUT',
          retry: false,
          ...(driver === 'apollo' ? {} : { http: { status: 409 } }),
        },
      },
    ],
  ])(
    'storeErrors: a 4xx error (%s) is stored, its writes rolled back, and replayed as the same GraphQL error',
    async (_, outcome, details) => {
      const reference = `${driver}-${platform}-${outcome}`;
      const key = `${outcome}-1`;
      const document = `mutation { placeOrderRefused(reference: "${reference}") { id } }`;
      const refused = await graphql(document, { key });
      expect(refused).toEqual({
        status: 200,
        body: {
          data: null,
          errors: [
            {
              message: expect.stringContaining(reference),
              locations: [{ line: 1, column: 12 }],
              path: ['placeOrderRefused'],
              ...details,
            },
          ],
        },
      });
      const replay = await graphql(document, { key });
      expect(replay).toEqual(refused);
      expect(gate.runs).toEqual({ placeOrderRefused: 1 });
      expect(await rows(reference)).toBe(0);
      expect(await records(`${key}%`)).toEqual([
        {
          key: `${key}#placeOrderRefused`,
          status: 'failed',
          method: 'MUTATION',
          path: 'Mutation.placeOrderRefused',
        },
      ]);
    },
  );

  it("storeErrors: the module's refusal that a resolver threw (a nested run()'s 422) is stored, and replayed as the same GraphQL error, its code and problem details", async () => {
    const reference = `${driver}-${platform}-nested-reused`;
    const key = `nested-reused-${driver}-${platform}`;
    const document = `mutation { placeOrderRefused(reference: "${reference}") { id } }`;
    const refused = await graphql(document, { key });
    expect(refused).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          {
            message:
              'This idempotency key was already used for a different request. Use a new key for a new request.',
            locations: [{ line: 1, column: 12 }],
            path: ['placeOrderRefused'],
            extensions: {
              code: 'IDEMPOTENCY_KEY_REUSED',
              status: 422,
              type: 'urn:idempotency:key-reused',
              title: 'Idempotency key reused',
              detail:
                'This idempotency key was already used for a different request. Use a new key for a new request.',
              key: reference,
            },
          },
        ],
      },
    });
    expect(await records(`${key}%`)).toEqual([
      expect.objectContaining({ status: 'failed' }),
    ]);
    // Before the fix the duplicate got the stored error thrown again as an
    // HttpException, which the drivers answer with their own code and
    // without the problem details.
    expect(await graphql(document, { key })).toEqual(refused);
    expect(gate.runs).toEqual({ placeOrderRefused: 1 });
    expect(await rows(reference)).toBe(0);
  });

  it('storeErrors: an error the policy does not store (a 500) releases the key: the retry runs again', async () => {
    const document = `mutation { placeOrderRefused(reference: "crash") { id } }`;
    const key = `crash-${driver}-${platform}`;
    const crashed = await graphql(document, { key });
    expect(crashed.body.errors).toEqual([
      expect.objectContaining({ message: 'The stock service crashed' }),
    ]);
    expect(await records(`${key}%`)).toEqual([]);
    expect(await graphql(document, { key })).toEqual(crashed);
    expect(gate.runs).toEqual({ placeOrderRefused: 2 });
  });

  it('storeErrors: an error thrown after a serialization failure the resolver caught gets IDEMPOTENCY_UNAVAILABLE (503, retryAfter), nothing stored: the retry runs', async () => {
    const reference = `${driver}-${platform}-conflicted`;
    const key = `conflicted-${driver}-${platform}`;
    const document = `mutation { placeOrderRefused(reference: "${reference}") { id } }`;
    gate.failures = 1;
    const conflicted = await graphql(document, { key });
    expect(conflicted).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          expect.objectContaining({
            path: ['placeOrderRefused'],
            extensions: refusal('IDEMPOTENCY_UNAVAILABLE', 503, 'unavailable', {
              retryAfter: 1,
            }),
          }),
        ],
      },
    });
    expect(await records(`${key}%`)).toEqual([]);
    const retry = await graphql(document, { key });
    expect(retry.body.errors).toEqual([
      expect.objectContaining({
        message: `Out of stock: ${reference}`,
        path: ['placeOrderRefused'],
      }),
    ]);
    expect(gate.runs).toEqual({ placeOrderRefused: 2 });
    expect(await rows(reference)).toBe(0);
    expect(await records(`${key}%`)).toEqual([
      expect.objectContaining({ status: 'failed' }),
    ]);
    expect(await graphql(document, { key })).toEqual(retry);
    expect(gate.runs).toEqual({ placeOrderRefused: 2 });
  });

  it('a mutation past its transactionTimeout gets IDEMPOTENCY_UNAVAILABLE (503, retryAfter): nothing commits, the key is free', async () => {
    const reference = `${driver}-${platform}-late`;
    const document = `mutation { placeOrderLate(reference: "${reference}") { id } }`;
    const late = await graphql(document, { key: 'late-1' });
    expect(late).toEqual({
      status: 200,
      body: {
        data: null,
        errors: [
          expect.objectContaining({
            path: ['placeOrderLate'],
            extensions: refusal('IDEMPOTENCY_UNAVAILABLE', 503, 'unavailable', {
              retryAfter: 1,
            }),
          }),
        ],
      },
    });
    expect(await records('late-1%')).toEqual([]);
    // The abandoned resolver goes on: its write is refused.
    gate.barrier.open();
    const retry = await graphql(document, { key: 'late-1' });
    expect(retry.body.data).toEqual({
      placeOrderLate: { id: expect.any(Number) },
    });
    expect(await rows(reference)).toBe(1);
    expect(gate.runs).toEqual({ placeOrderLate: 2 });
  });

  it('@Idempotent() on a resolver class applies to its mutations only', async () => {
    const reference = `${driver}-${platform}-restock`;
    const count = await graphql('query { orderCount }');
    expect(count.body).toEqual({ data: { orderCount: expect.any(Number) } });
    const keyless = await graphql(
      `mutation { restock(reference: "${reference}") }`,
    );
    expect(keyless.body.errors).toEqual([
      expect.objectContaining({
        extensions: refusal('IDEMPOTENCY_KEY_MISSING', 400, 'missing-key'),
      }),
    ]);
    const first = await graphql(
      `mutation { restock(reference: "${reference}") }`,
      { key: 'restock-1' },
    );
    expect(first.body).toEqual({ data: { restock: expect.any(Number) } });
    expect(
      await graphql(`mutation { restock(reference: "${reference}") }`, {
        key: 'restock-1',
      }),
    ).toEqual(first);
    expect(gate.runs).toEqual({ restock: 1 });
    expect(await rows(reference)).toBe(1);
  });
}

describeGraphqlServers('GraphQL mutations', graphqlMutations);
