import { Controller, Module, Post, Res } from '@nestjs/common';
import { IdempotencyConfigurationError, Idempotent } from '../../src/index.js';
import { IDEMPOTENT_BODY_OMITTED_HEADER } from '../../src/client/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  send,
  PLATFORMS,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { useContractApp } from './contract-app.js';
import type { Runs } from './contract.module.js';

@Controller('library-mode')
class LibraryModeController {
  @Post()
  @Idempotent()
  create(@Res() res: { json(body: unknown): void }) {
    res.json({ sent: 'by hand' });
  }
}

@Module({ controllers: [LibraryModeController] })
class LibraryModeModule {}

describe.each(PLATFORMS)(
  'responses that cannot be replayed (%s)',
  (platform) => {
    let target: TestApp;
    let runs: Runs;

    useContractApp(platform, (app) => ({ target, runs } = app));

    const record = async (key: string) =>
      target.db.query<{ status: string; response_body: Buffer | null }>(
        `SELECT status, response_body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [key],
      );

    it('refuses @Idempotent() on a handler that sends its response itself (@Res()) at bootstrap', async () => {
      await expect(
        startTestApp({ platform, imports: [LibraryModeModule] }),
      ).rejects.toThrow(IdempotencyConfigurationError);
      await expect(
        startTestApp({ platform, imports: [LibraryModeModule] }),
      ).rejects.toThrow(/LibraryModeController\.create.*@Res\(\)/);
    });

    it('commits a streamed response and marks the key not replayable: a duplicate gets its status with the body omitted, never a second run', async () => {
      const first = await send(target, '/responses/stream', {
        key: 'stream-1',
        body: { reference: 'stream' },
      });
      expect(first.status).toBe(201);
      expect(await first.text()).toBe('chunk-1 of run 1\nchunk-2\n');
      expect(await record('stream-1')).toEqual([
        { status: 'not_replayable', response_body: null },
      ]);

      const second = await send(target, '/responses/stream', {
        key: 'stream-1',
        body: { reference: 'stream' },
      });
      expect(second.status).toBe(201);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.headers.get(IDEMPOTENT_BODY_OMITTED_HEADER)).toBe('true');
      expect(second.headers.get('content-type')).toBeNull();
      expect(await second.text()).toBe('');
      expect(runs.counts['responses/stream']).toBe(1);
      expect(
        await target.db.query(
          `SELECT 1 FROM orders WHERE reference = 'stream'`,
        ),
      ).toHaveLength(1);
    });

    it('answers 503 when the transaction of a streamed response cannot commit: nothing stays, nothing is streamed, the retry runs', async () => {
      await target.db.query(
        `CREATE TABLE commit_checks (n int,
           CONSTRAINT commit_checks_n UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)`,
      );
      const refused = await send(target, '/responses/stream-commit-refused', {
        key: 'stream-refused-1',
        body: { reference: 'stream-refused' },
      });
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(((await refused.json()) as { type: string }).type).toBe(
        'urn:idempotency:unavailable',
      );
      const orders = () =>
        target.db.query(
          `SELECT 1 FROM orders WHERE reference = 'stream-refused'`,
        );
      expect(await orders()).toHaveLength(0);
      expect(await record('stream-refused-1')).toEqual([]);

      await target.db.query(
        `ALTER TABLE commit_checks DROP CONSTRAINT commit_checks_n`,
      );
      const retry = await send(target, '/responses/stream-commit-refused', {
        key: 'stream-refused-1',
        body: { reference: 'stream-refused' },
      });
      expect(retry.status).toBe(201);
      expect(await retry.text()).toBe('streamed\n');
      expect(await record('stream-refused-1')).toEqual([
        { status: 'not_replayable', response_body: null },
      ]);
      expect(await orders()).toHaveLength(1);
      expect(runs.counts['responses/stream-commit-refused']).toBe(2);
    });

    it('sends and commits a response over maxResponseSize, but does not store it: a duplicate gets its status with the body omitted', async () => {
      const first = await send(target, '/responses/large', {
        key: 'large-1',
        body: { reference: 'large' },
      });
      expect(first.status).toBe(201);
      expect(
        ((await first.json()) as { padding: string }).padding,
      ).toHaveLength(2048);
      expect(await record('large-1')).toEqual([
        { status: 'not_replayable', response_body: null },
      ]);
      const second = await send(target, '/responses/large', {
        key: 'large-1',
        body: { reference: 'large' },
      });
      expect(second.status).toBe(201);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.headers.get('idempotent-body-omitted')).toBe('true');
      expect(await second.text()).toBe('');
      expect(runs.counts['responses/large']).toBe(1);
      expect(
        await target.db.query(`SELECT 1 FROM orders WHERE reference = 'large'`),
      ).toHaveLength(1);
    });

    it('stores nothing of a streamed 4xx with Retry-After, as of a returned one: its writes roll back, and the retry runs it', async () => {
      const key = 'stream-retry-later';
      const reference = 'stream-retry-later';
      const orders = async () =>
        (
          await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
            reference,
          ])
        ).length;
      const first = await send(target, '/responses/stream-retry-later', {
        key,
        body: { reference },
      });
      expect(first.status).toBe(403);
      expect(first.headers.get('retry-after')).toBe('30');
      expect(await first.text()).toBe('not yet, run 1\n');
      expect(await record(key)).toEqual([]);
      expect(await orders()).toBe(0);

      const retry = await send(target, '/responses/stream-retry-later', {
        key,
        body: { reference },
      });
      expect(retry.status).toBe(403);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(await retry.text()).toBe('not yet, run 2\n');
      expect(runs.counts['responses/stream-retry-later']).toBe(2);
      expect(await record(key)).toEqual([]);
      expect(await orders()).toBe(0);
    });

    it.each([
      [500, '@HttpCode(500)', 'http-code-500'],
      [503, '@HttpCode(503)', 'http-code-503'],
      [500, 'res.status(500)', 'res-status/500'],
      [503, 'res.status(503)', 'res-status/503'],
      [429, '@HttpCode(429)', 'http-code-429'],
      [408, 'res.status(408)', 'res-status/408'],
      [425, 'res.status(425)', 'res-status/425'],
      [429, 'res.status(429)', 'res-status/429'],
    ] as const)(
      'stores nothing of a %i the handler returns (%s) rather than throws: its writes roll back and the retry runs it',
      async (status, _how, route) => {
        const key = `returned-${route}`;
        const reference = `returned-${route}`;
        const orders = async () =>
          (
            await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
              reference,
            ])
          ).length;
        const first = await send(target, `/responses/returned/${route}`, {
          key,
          body: { reference },
        });
        expect(first.status).toBe(status);
        expect(await first.json()).toEqual({ run: 1 });
        expect(await record(key)).toEqual([]);
        expect(await orders()).toBe(0);

        const retry = await send(target, `/responses/returned/${route}`, {
          key,
          body: { reference },
        });
        expect(retry.status).toBe(status);
        expect(retry.headers.get('idempotent-replayed')).toBeNull();
        expect(await retry.json()).toEqual({ run: 2 });
        expect(runs.counts[`responses/returned/${route}`]).toBe(2);
        expect(await record(key)).toEqual([]);
        expect(await orders()).toBe(0);
      },
    );

    it('does not replay denied headers', async () => {
      const first = await send(target, '/responses/headers-deny', {
        key: 'deny-1',
      });
      expect(first.headers.get('x-request-id')).toBe('req-1');
      expect(first.headers.get('x-kept')).toBe('kept-1');
      const second = await send(target, '/responses/headers-deny', {
        key: 'deny-1',
      });
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.headers.get('x-request-id')).toBeNull();
      expect(second.headers.get('x-kept')).toBe('kept-1');
    });

    it('replays only allowed headers, and always the content type', async () => {
      await send(target, '/responses/headers-allow', { key: 'allow-1' });
      const second = await send(target, '/responses/headers-allow', {
        key: 'allow-1',
      });
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.headers.get('x-kept')).toBe('kept-1');
      expect(second.headers.get('x-request-id')).toBeNull();
      expect(second.headers.get('content-type')).toMatch(/^application\/json/);
    });
  },
);
