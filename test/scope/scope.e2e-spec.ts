import type { ExecutionContext } from '@nestjs/common';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { ScopeTestModule, TenantRuns } from './scope.module.js';
import { answer } from '../utils/problems.js';

/** The answer to a request whose scope resolver returned an invalid scope. */
const CONFIGURATION_ERROR = {
  status: 500,
  contentType: expect.stringMatching(/^application\/json/),
  retryAfter: null,
  replayed: false,
  body: { statusCode: 500, message: 'Internal server error' },
};

const tenantOf = (context: ExecutionContext) =>
  String(
    context.switchToHttp().getRequest<{ headers: Record<string, string> }>()
      .headers['x-tenant'],
  );

describe.each(PLATFORMS)('scopes (%s)', (platform) => {
  let target: TestApp;
  let tenantRuns: Record<string, number>;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [ScopeTestModule],
      idempotency: { scope: tenantOf },
      platform,
    });
    tenantRuns = target.app.get(TenantRuns).perTenant;
  });
  afterAll(() => target.close());

  const post = (tenant: string, key: string, amount = 100) =>
    send(target, '/scoped', {
      key,
      headers: { 'X-Tenant': tenant },
      body: { tenant, amount },
    });

  it('runs the same key once per scope and never replays across scopes', async () => {
    const a = await post('tenant-a', 'shared-key');
    const b = await post('tenant-b', 'shared-key');
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(await b.json()).toEqual({ tenant: 'tenant-b', amount: 100 });
    expect(tenantRuns).toEqual({ 'tenant-a': 1, 'tenant-b': 1 });

    const againA = await post('tenant-a', 'shared-key');
    expect(againA.headers.get('idempotent-replayed')).toBe('true');
    expect(await againA.json()).toEqual({ tenant: 'tenant-a', amount: 100 });
    expect(tenantRuns['tenant-a']).toBe(1);

    const rows = await target.db.query<{ scope: string }>(
      `SELECT scope FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'shared-key' ORDER BY scope`,
    );
    expect(rows.map((r) => r.scope)).toEqual(['tenant-a', 'tenant-b']);
  });

  it('does not judge a payload against another scope (no 422 across scopes)', async () => {
    await post('tenant-c', 'key-2', 1);
    const other = await post('tenant-d', 'key-2', 2);
    expect(other.status).toBe(201);
    expect(await other.json()).toEqual({ tenant: 'tenant-d', amount: 2 });
  });

  it('never makes the same key of another scope wait or conflict while it executes', async () => {
    const runs = target.app.get(TenantRuns);
    runs.held.add('tenant-e');
    const postHeld = (tenant: string) =>
      send(target, '/scoped/held', {
        key: 'key-3',
        headers: { 'X-Tenant': tenant },
        body: { tenant, amount: 3 },
      });
    const first = postHeld('tenant-e');
    await runs.barrier.reached(1);
    // Held in tenant-e: a duplicate there conflicts, tenant-f runs at once.
    expect((await postHeld('tenant-e')).status).toBe(409);
    const other = await postHeld('tenant-f');
    expect(other.status).toBe(201);
    expect(await other.json()).toEqual({ tenant: 'tenant-f', amount: 3 });
    runs.barrier.open();
    expect((await first).status).toBe(201);
    expect(tenantRuns).toMatchObject({ 'tenant-e': 1, 'tenant-f': 1 });
  });
});

/** The scope of a request: its body's `tenant`, whatever text it holds. */
const bodyTenant = (context: ExecutionContext) =>
  context.switchToHttp().getRequest<{ body: { tenant: string } }>().body.tenant;

describe.each(PLATFORMS)('scopes of any text (%s)', (platform) => {
  let target: TestApp;
  let tenantRuns: Record<string, number>;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [ScopeTestModule],
      idempotency: { scope: bodyTenant },
      platform,
    });
    tenantRuns = target.app.get(TenantRuns).perTenant;
  });
  afterAll(() => target.close());

  const post = (tenant: string, key: string) =>
    answer(send(target, '/scoped', { key, body: { tenant, amount: 1 } }));
  const rows = (key: string) =>
    target.db.query<{ scope: string }>(
      `SELECT scope FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );

  it('refuses a scope with a lone surrogate as a configuration error (500), running and storing nothing: it never shares the record of the scope PostgreSQL writes in its place (U+FFFD)', async () => {
    expect(await post('tenant-\ud800', 'lone-1')).toEqual(CONFIGURATION_ERROR);
    expect(tenantRuns['tenant-\ud800']).toBeUndefined();
    expect(await rows('lone-1')).toEqual([]);
    // The tenant whose scope PostgreSQL would have written runs its own.
    expect(await post('tenant-\ufffd', 'lone-1')).toEqual(
      expect.objectContaining({
        status: 201,
        replayed: false,
        body: { tenant: 'tenant-\ufffd', amount: 1 },
      }),
    );
    expect(tenantRuns['tenant-\ufffd']).toBe(1);
    expect(await rows('lone-1')).toEqual([{ scope: 'tenant-\ufffd' }]);
  });

  it('refuses a scope with a NUL character, which PostgreSQL refuses, as any other invalid scope: a configuration error (500, no Retry-After), never a 503 to retry for ever', async () => {
    for (let attempt = 0; attempt < 2; attempt += 1) {
      expect(await post('tenant\u0000x', 'nul-1')).toEqual(CONFIGURATION_ERROR);
    }
    expect(tenantRuns['tenant\u0000x']).toBeUndefined();
    expect(await rows('nul-1')).toEqual([]);
  });
});
