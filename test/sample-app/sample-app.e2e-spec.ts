import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

/** Built by `npm run build && npm run build:sample`, which `npm test` runs. */
const MAIN = fileURLToPath(
  new URL('../../dist-sample/main.js', import.meta.url),
);
const READY = /Payments sample listening on (http:\/\/\S+)/;

interface PaymentJson {
  id: string;
  amount: number;
  currency: string;
  merchantId: string;
  ledgerEntries: Array<{ account: string; direction: string; amount: number }>;
}

/** Resolves with the URL of the ready line; rejects if the app exits first. */
function readyUrl(app: ChildProcess, output: () => string): Promise<string> {
  return new Promise((resolve, reject) => {
    const onData = () => {
      const match = READY.exec(output());
      if (match) {
        app.stdout?.off('data', onData);
        app.off('exit', onExit);
        resolve(match[1]);
      }
    };
    const onExit = (code: number | null, signal: string | null) =>
      reject(
        new Error(
          `The sample app exited (code ${code}, signal ${signal}) before it was ready:\n${output()}`,
        ),
      );
    app.stdout?.on('data', onData);
    app.once('exit', onExit);
  });
}

describe('the sample app, run as `node dist-sample/main.js`', () => {
  let db: TestDatabase;
  let app: ChildProcess | undefined;
  let url: string;
  let output = '';

  beforeAll(async () => {
    if (!existsSync(MAIN)) {
      throw new Error(
        `${MAIN} does not exist: run \`npm run build && npm run build:sample\` first (\`npm test\` does).`,
      );
    }
    db = await createTestDatabase();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DATABASE_URL: db.url,
      PORT: '0',
      NO_COLOR: '1',
    };
    // Jest's own flags are not the app's.
    delete env.NODE_OPTIONS;
    app = spawn(process.execPath, [MAIN], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // Read everything the app prints, so that a full pipe never blocks it.
    app.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    app.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    url = await readyUrl(app, () => output);
  });

  afterAll(async () => {
    if (app && app.exitCode === null && app.signalCode === null) {
      const exited = once(app, 'exit');
      app.kill('SIGTERM');
      await exited;
    }
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
    const running = app as ChildProcess;
    const exited = once(running, 'exit');
    running.kill('SIGTERM');
    const [code, signal] = (await exited) as [number | null, string | null];
    // Nest closes the app, then lets the signal end the process.
    expect({ code, signal }).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
