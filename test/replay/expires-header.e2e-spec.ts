import {
  BadRequestException,
  Controller,
  InternalServerErrorException,
  Module,
  Post,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent } from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

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

/** Handlers that fail, their errors stored or not. */
@Controller('failing')
class FailingController {
  @Post('released')
  @Idempotent()
  released() {
    throw new BadRequestException('Not yet.');
  }

  @Post('stored')
  @Idempotent({ storeErrors: true })
  stored() {
    throw new BadRequestException('Not yet.');
  }

  /** A 500 is never stored, whatever the policy. */
  @Post('declined')
  @Idempotent({ storeErrors: true })
  declined() {
    throw new InternalServerErrorException('Broken.');
  }
}

@Module({ controllers: [SlowController, FailingController] })
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

describe.each(PLATFORMS)(
  'the Idempotency-Expires header of an error (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        imports: [SlowModule],
        platform,
        idempotency: { expiresHeader: true, gc: false },
      });
    });
    afterAll(() => target.close());

    const failing = async (route: string, key: string) => {
      const answer = await send(target, `/failing/${route}`, { key });
      return {
        status: answer.status,
        replayed: answer.headers.get('idempotent-replayed'),
        expires: answer.headers.get('idempotency-expires'),
        records: (
          await target.db.query(
            'SELECT status FROM idempotency_records WHERE key = $1',
            [key],
          )
        ).length,
      };
    };

    it.each([
      ['released', 400],
      ['declined', 500],
    ])(
      'is not sent with an error whose key was released (/failing/%s): no record expires then',
      async (route, status) => {
        expect(await failing(route, randomUUID())).toEqual({
          status,
          replayed: null,
          expires: null,
          records: 0,
        });
      },
    );

    it('is sent with a stored error, and its replay carries the same', async () => {
      const key = randomUUID();
      const first = await failing('stored', key);
      expect(first).toEqual({
        status: 400,
        replayed: null,
        expires: expect.stringMatching(/ GMT$/),
        records: 1,
      });
      expect(await failing('stored', key)).toEqual({
        ...first,
        replayed: 'true',
      });
    });
  },
);
