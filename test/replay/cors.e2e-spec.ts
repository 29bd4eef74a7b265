/**
 * The CORS layer answers each request from its own `Origin`. A replay
 * carries the headers of the original response, but not its
 * `Access-Control-*` ones: those are the replay's own, else a browser of
 * another origin (the same user on another of the application's sites)
 * would be refused the replayed answer.
 */
import { Body, Controller, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
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
