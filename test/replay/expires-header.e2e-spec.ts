import {
  BadRequestException,
  Controller,
  HttpCode,
  InternalServerErrorException,
  Module,
  Post,
  Res,
  StreamableFile,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { Idempotent } from '../../src/index.js';
import { until } from '../utils/barrier.js';
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

  /** How many times each of the routes below ran. */
  runs: Record<string, number> = {};

  /** A failure returned, not thrown: the key is released all the same. */
  @Post('returned-500')
  @Idempotent()
  @HttpCode(500)
  returned500() {
    return { run: this.run('returned-500') };
  }

  /** A come back later returned: released. */
  @Post('returned-429')
  @Idempotent()
  @HttpCode(429)
  returned429() {
    return { run: this.run('returned-429') };
  }

  /** A stream under a failing status: released, nothing of it committed. */
  @Post('stream-503')
  @Idempotent()
  @HttpCode(503)
  stream503() {
    this.run('stream-503');
    return new StreamableFile(Readable.from([Buffer.from('down')]));
  }

  /**
   * An error the handler sends itself: released, but sent before the module
   * sees it, with the header set before the handler ran.
   */
  @Post('sent-400')
  @Idempotent()
  sent400(
    @Res({ passthrough: true })
    res: {
      status?: (code: number) => unknown;
      code?: (code: number) => unknown;
    },
  ) {
    const run = this.run('sent-400');
    (res.status ?? res.code)!.call(res, 400);
    (res as { send(body: unknown): void }).send({ run });
  }

  private run(route: string): number {
    this.runs[route] = (this.runs[route] ?? 0) + 1;
    return this.runs[route];
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

    const controller = () => target.app.get(FailingController);

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

    it.each([
      ['returned-500', 500, '{"run":1}', '{"run":2}'],
      ['returned-429', 429, '{"run":1}', '{"run":2}'],
      ['stream-503', 503, 'down', 'down'],
    ])(
      'is not sent with a failure the handler returned (/failing/%s): its key is released, no record expires then',
      async (route, status, body, retried) => {
        const key = randomUUID();
        const answer = async () => {
          const response = await send(target, `/failing/${route}`, { key });
          return {
            status: response.status,
            replayed: response.headers.get('idempotent-replayed'),
            expires: response.headers.get('idempotency-expires'),
            body: await response.text(),
            records: (
              await target.db.query(
                'SELECT status FROM idempotency_records WHERE key = $1',
                [key],
              )
            ).length,
          };
        };
        const before = controller().runs[route] ?? 0;
        expect(await answer()).toEqual({
          status,
          replayed: null,
          expires: null,
          body,
          records: 0,
        });
        // Released: the retry runs the handler again.
        expect(await answer()).toEqual({
          status,
          replayed: null,
          expires: null,
          body: retried,
          records: 0,
        });
        expect(controller().runs[route]).toBe(before + 2);
      },
    );

    it('is sent with an error the handler sends itself (@Res({ passthrough: true })), out before the module sees it: the documented exception', async () => {
      const key = randomUUID();
      const response = await send(target, '/failing/sent-400', { key });
      expect(response.status).toBe(400);
      expect(await response.json()).toEqual({ run: expect.any(Number) });
      expect(response.headers.get('idempotency-expires')).toMatch(/ GMT$/);
      // Released all the same (once the answer is out): nothing stored.
      await until(
        async () =>
          (
            await target.db.query(
              'SELECT status FROM idempotency_records WHERE key = $1',
              [key],
            )
          ).length === 0,
        'the key of the error sent by the handler to be released',
      );
    });

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
