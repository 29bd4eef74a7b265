/**
 * @nestjs-cls/transactional with the module's Prisma adapter, over HTTP on
 * Express and Fastify: inside a decorated handler, the handler's
 * interactive transaction is the plugin's current one.
 */
import { randomUUID } from 'node:crypto';
import { describeWithRequireEsm } from '../utils/jest-esm.js';
import { PLATFORMS } from '../utils/test-app.js';
import { startAdapterApp, type AdapterApp } from './adapter-app.js';
import { reader as readerOf, withModules } from './drizzle-app.js';
import type { LedgerRequest } from './prisma-cls.module.js';
import { prismaFixture } from './prisma.fixture.js';

/**
 * nestjs-cls is CommonJS and requires @nestjs/common 12, an ES module (see
 * `describeWithRequireEsm`).
 */
const describeCls = describeWithRequireEsm('@nestjs-cls/transactional');

/**
 * The test module, loaded once @nestjs/common is: Jest refuses a require()
 * of an ES module that is still being loaded itself.
 */
const fixtures = () => import('./prisma-cls.module.js');

describeCls.each(PLATFORMS)(
  '@nestjs-cls/transactional on Prisma (%s)',
  (platform) => {
    let target: AdapterApp;
    const reader = readerOf(() => target);
    const post = (path: string, body: LedgerRequest) =>
      reader.post(path, body.reference, { ...body });
    /** The sources of the payments of `reference`, in the order written. */
    const sources = async (reference: string) =>
      (await reader.payments(`${reference}/`)).map((key) => key.split('/')[1]);
    const record = async (reference: string) =>
      (await reader.record(reference))?.status;

    beforeAll(async () => {
      const { clsModule, PrismaClsTestModule } = await fixtures();
      target = await startAdapterApp(
        withModules(prismaFixture, clsModule(), PrismaClsTestModule),
        { platform },
      );
    });
    afterAll(() => target?.close());

    it("makes the handler's transaction the plugin's: txHost.tx, joined by @Transactional() and Mandatory, a savepoint for Nested; RequiresNew and NotSupported apart, Never refused", async () => {
      const reference = randomUUID();
      const response = await post('/ledger', { reference, failNested: true });
      expect(response.status).toBe(201);
      const result = (await response.json()) as Record<string, unknown>;
      expect(result).toEqual({
        active: true,
        handle: true,
        required: result.handler,
        mandatory: result.handler,
        audit: expect.not.stringMatching(`^${String(result.handler)}$`),
        nested: 'failed',
        unsupported: false,
        never: 'TransactionAlreadyActiveError',
        handler: expect.any(String),
      });
      // The failed Nested rolled back to its savepoint only.
      expect(await sources(reference)).toEqual([
        'required',
        'mandatory',
        'audit',
        'unsupported',
        'api',
      ]);
      expect(await record(reference)).toBe('completed');

      const nested = randomUUID();
      const joined = await post('/ledger', { reference: nested });
      expect(joined.status).toBe(201);
      const { handler, nested: savepoint } = (await joined.json()) as Record<
        string,
        unknown
      >;
      expect(savepoint).toBe(handler);
      expect(await sources(nested)).toEqual([
        'required',
        'mandatory',
        'audit',
        'nested',
        'unsupported',
        'api',
      ]);
    });

    it('rolls back all but RequiresNew and NotSupported when the handler throws after @Transactional() returned', async () => {
      const reference = randomUUID();
      const failed = await post('/ledger', { reference, fail: true });
      expect(failed.status).toBe(400);
      expect(await sources(reference)).toEqual(['audit', 'unsupported']);
      expect(await record(reference)).toBeUndefined();
    });

    it("runs a batch $transaction([...]) on txHost.tx in the handler's transaction: rolled back with it, committed with it", async () => {
      const reference = randomUUID();
      const failed = await post('/ledger', {
        reference,
        batch: true,
        fail: true,
      });
      expect(failed.status).toBe(400);
      expect(await sources(reference)).toEqual([]);
      expect(await record(reference)).toBeUndefined();

      const response = await post('/ledger', { reference, batch: true });
      expect(response.status).toBe(201);
      const { batch, handler } = (await response.json()) as Record<
        string,
        unknown
      >;
      expect(batch).toBe(handler);
      expect(await sources(reference)).toEqual(['batch', 'api']);
      expect(await record(reference)).toBe('completed');
    });

    it('opens a transaction of its own outside decorated handlers', async () => {
      const reference = randomUUID();
      const response = await post('/plain-ledger', { reference });
      expect(response.status).toBe(201);
      expect(await response.json()).toEqual({ active: true });
      expect(await sources(reference)).toEqual(['plain']);
    });
  },
);
