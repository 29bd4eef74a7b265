import { Controller, Module, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';

@Controller('slow')
class SlowController {
  /** Outlives its ttl (1 s): answers once 2.1 s have passed since it began. */
  @Post()
  @Idempotent({ ttl: '1s' })
  async pay() {
    const began = Date.now();
    // The subject is the ttl running out while the handler works.
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    return { tookMs: Date.now() - began };
  }
}

@Module({ controllers: [SlowController] })
class SlowModule {}

describe('the Idempotency-Expires header', () => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [SlowModule],
      idempotency: { expiresHeader: true },
    });
  });
  afterAll(() => target.close());

  it('of a handler that outlived its ttl is ttl after its completion, when its record expires, never in the past', async () => {
    const answer = await send(target, '/slow', { key: 'slow-1' });
    const received = Date.now();
    expect(answer.status).toBe(201);
    const expires = Date.parse(answer.headers.get('idempotency-expires')!);
    // An HTTP-date counts whole seconds: at most 1 s below the completion's
    // plus ttl, which is at least the answer's arrival.
    expect(expires).toBeGreaterThanOrEqual(received - 999);
    const [record] = await target.db.query<{ expires: number }>(
      `SELECT (extract(epoch FROM expires_at) * 1000)::float8 AS expires
         FROM idempotency_records WHERE key = 'slow-1'`,
    );
    expect(Math.abs(record.expires - expires)).toBeLessThan(1_500);
  });
});
