import { randomUUID } from 'node:crypto';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';

interface PaymentJson {
  id: string;
  amount: number;
  currency: string;
  merchantId: string;
  ledgerEntries: Array<{ account: string; direction: string; amount: number }>;
}

describe('the sample app, run as `node dist-sample/main.js`', () => {
  let db: TestDatabase;
  let app: SampleProcess;
  let url: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await startSample({ DATABASE_URL: db.url });
    url = app.url;
  });

  afterAll(async () => {
    await app?.stop();
    await db?.drop();
  });

  const count = async (table: string) =>
    (
      await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)
    )[0].n;
  const createPayment = (key: string, body: unknown) =>
    fetch(`${url}/payments`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
      body: JSON.stringify(body),
    });
  const valid = { amount: 1250, currency: 'EUR', merchantId: 'm_42' };
  let created: PaymentJson;

  it('creates a payment once and replays it for a retry with the same key', async () => {
    const key = randomUUID();
    const first = await createPayment(key, valid);
    const firstBody = await first.text();
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    created = JSON.parse(firstBody) as PaymentJson;
    expect(created).toMatchObject({ ...valid, id: expect.any(String) });
    expect(created.ledgerEntries).toEqual([
      expect.objectContaining({
        account: 'customer',
        direction: 'debit',
        amount: 1250,
      }),
      expect.objectContaining({
        account: 'merchant:m_42',
        direction: 'credit',
        amount: 1250,
      }),
    ]);

    const retry = await createPayment(key, valid);
    expect(retry.status).toBe(first.status);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.text()).toBe(firstBody);

    expect(await count('payments')).toBe(1);
    expect(await count('ledger_entries')).toBe(2);
  });

  it('returns the payment with its ledger entries by id', async () => {
    const found = await fetch(`${url}/payments/${created.id}`);
    expect(found.status).toBe(200);
    expect(await found.json()).toEqual(created);

    expect((await fetch(`${url}/payments/${randomUUID()}`)).status).toBe(404);
    expect((await fetch(`${url}/payments/not-a-uuid`)).status).toBe(400);
  });

  it.each([
    ['a zero amount', { ...valid, amount: 0 }],
    ['a fractional amount', { ...valid, amount: 12.5 }],
    ['an unknown currency', { ...valid, currency: 'EURO' }],
    ['no merchant', { amount: 1250, currency: 'EUR' }],
    ['an unknown field', { ...valid, customerId: 'c_1' }],
  ])('rejects %s with 400 and writes nothing', async (_case, body) => {
    const key = randomUUID();
    const response = await createPayment(key, body);
    expect(response.status).toBe(400);
    expect(await count('payments')).toBe(1);
    expect(await count('ledger_entries')).toBe(2);
    expect(
      await db.query('SELECT 1 FROM idempotency_records WHERE key = $1', [key]),
    ).toHaveLength(0);
  });

  it.each([
    ['arrays', '['.repeat(50_000) + ']'.repeat(50_000)],
    // Within the 100 KB the JSON parser takes.
    ['objects', '{"a":'.repeat(16_000) + '1' + '}'.repeat(16_000)],
  ])(
    'refuses a body of %s nested thousands of levels deep with 400 before validating it: no 500, no stack, nothing stored',
    async (_nesting, body) => {
      const key = randomUUID();
      const response = await fetch(`${url}/payments`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body,
      });
      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toBe(
        'application/problem+json',
      );
      expect(await response.json()).toEqual({
        type: 'about:blank',
        title: 'Bad Request',
        status: 400,
        detail:
          'The request body nests arrays or objects more than 32 levels deep. Send a flat JSON object, such as {"amount":1250,"currency":"EUR","merchantId":"m_42"}.',
      });
      expect(await count('payments')).toBe(1);
      expect(
        await db.query('SELECT 1 FROM idempotency_records WHERE key = $1', [
          key,
        ]),
      ).toHaveLength(0);
      expect(app.output()).not.toMatch(/RangeError|call stack/);
    },
  );

  it('lets a body nested 32 levels deep through to validation, and refuses one nested 33 before it', async () => {
    const nested = (levels: number): unknown =>
      levels === 0 ? 1 : { deeper: nested(levels - 1) };
    const post = (body: unknown) =>
      createPayment(randomUUID(), { ...valid, note: body });
    const validated = await post(nested(31));
    expect(validated.status).toBe(400);
    expect(validated.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await validated.json()) as { message: string[] }).message).toEqual(
      ['property note should not exist'],
    );
    const refused = await post(nested(32));
    expect(refused.status).toBe(400);
    expect(refused.headers.get('content-type')).toBe(
      'application/problem+json',
    );
    expect(await count('payments')).toBe(1);
  });

  it('rejects a payment without an Idempotency-Key', async () => {
    const response = await fetch(`${url}/payments`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(valid),
    });
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(await count('payments')).toBe(1);
  });

  it('shuts down on SIGTERM', async () => {
    // Nest closes the app, then lets the signal end the process.
    expect(await app.stop('SIGTERM')).toEqual({
      code: null,
      signal: 'SIGTERM',
    });
  });
});
