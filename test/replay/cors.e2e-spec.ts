/**
 * The CORS layer answers each request from its own `Origin`. A replay
 * carries the headers of the original response, but not its
 * `Access-Control-*` ones: those are the replay's own, else a browser of
 * another origin (the same user on another of the application's sites)
 * would be refused the replayed answer.
 */
import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Idempotent } from '../../src/index.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';

/** How many times the handler ran. */
let runs = 0;

@Controller('cors')
class CorsController {
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    runs += 1;
    return { amount: body.amount, run: runs };
  }
}

/** A handler whose writes the database refuses only at COMMIT. */
@Controller('cors-commit')
class CommitRefusedController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post()
  @Idempotent()
  async create() {
    // Breaks a deferred unique constraint: checked at COMMIT, once the
    // handler has returned.
    await this.dataSource.query(
      'INSERT INTO cors_commit_checks (n) VALUES (1), (1)',
    );
    return { ok: true };
  }
}

describe.each(PLATFORMS)('a replay under CORS (%s)', (platform) => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      controllers: [CorsController],
      platform,
      idempotency: { gc: false },
      configure: (app) =>
        app.enableCors({
          origin: ['https://a.example', 'https://b.example'],
          credentials: true,
          exposedHeaders: ['Idempotent-Replayed'],
        }),
    });
  });
  afterAll(() => target.close());

  const post = async (key: string, origin: string) => {
    const response = await fetch(`${target.url}/cors`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': key,
        origin,
      },
      body: JSON.stringify({ amount: 10 }),
    });
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed'),
      allowOrigin: response.headers.get('access-control-allow-origin'),
      allowCredentials: response.headers.get(
        'access-control-allow-credentials',
      ),
      body: (await response.json()) as unknown,
    };
  };

  it("answers the replay with the CORS headers of its own origin, not the first request's, and stores none", async () => {
    const key = randomUUID();
    const first = await post(key, 'https://a.example');
    expect(first).toEqual({
      status: 201,
      replayed: null,
      allowOrigin: 'https://a.example',
      allowCredentials: 'true',
      body: { amount: 10, run: expect.any(Number) },
    });
    expect(await post(key, 'https://b.example')).toEqual({
      ...first,
      replayed: 'true',
      allowOrigin: 'https://b.example',
    });
    const [record] = await target.db.query<{ headers: object }>(
      `SELECT response_headers AS headers FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );
    expect(Object.keys(record.headers)).not.toContain(
      'access-control-allow-origin',
    );
    expect(Object.keys(record.headers)).toContain('content-type');
  });
});

describe.each(PLATFORMS)(
  "an answer the module writes in place of the handler's, under CORS (%s)",
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        controllers: [CommitRefusedController],
        platform,
        idempotency: { gc: false, retryAfter: 7 },
        configure: (app) =>
          app.enableCors({
            origin: ['https://a.example'],
            exposedHeaders: ['Idempotent-Replayed', 'Retry-After'],
          }),
      });
      await target.db.query(
        `CREATE TABLE cors_commit_checks (n int,
           CONSTRAINT cors_commit_checks_n UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)`,
      );
    });
    afterAll(() => target.close());

    it('keeps the CORS headers on the 503 of a refused commit, so that a browser can read it and its Retry-After', async () => {
      const key = randomUUID();
      const response = await fetch(`${target.url}/cors-commit`, {
        method: 'POST',
        headers: { 'idempotency-key': key, origin: 'https://a.example' },
      });
      expect({
        status: response.status,
        allowOrigin: response.headers.get('access-control-allow-origin'),
        // Express joins them with ',', @fastify/cors with ', '.
        exposed: response.headers
          .get('access-control-expose-headers')
          ?.split(/, ?/),
        vary: response.headers.get('vary'),
        retryAfter: response.headers.get('retry-after'),
        contentType: response.headers.get('content-type'),
        body: (await response.json()) as unknown,
      }).toEqual({
        status: 503,
        allowOrigin: 'https://a.example',
        exposed: ['Idempotent-Replayed', 'Retry-After'],
        vary: expect.stringMatching(/\bOrigin\b/),
        retryAfter: '7',
        contentType: 'application/problem+json',
        body: {
          type: 'urn:idempotency:unavailable',
          title: 'Request not completed',
          status: 503,
          detail:
            'The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
        },
      });
      // Nothing committed, nothing stored: the retry runs.
      expect(await target.db.query('SELECT n FROM cors_commit_checks')).toEqual(
        [],
      );
      expect(
        await target.db.query(
          `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [key],
        ),
      ).toEqual([]);
    });
  },
);
