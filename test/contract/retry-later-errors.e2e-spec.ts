/**
 * The error policy never stores an answer that asks the client to come back
 * later, whatever it says: the module's own 409 (a key in progress, met by a
 * nested run()) and 503 (a downstream service unavailable), and an answer
 * with a `Retry-After`. Stored, each would answer every retry of the key
 * until it expires, for a request that a retry completes. An error policy
 * whose `redact` hook throws a bare value still answers and frees the key.
 */
import {
  BadRequestException,
  Body,
  Controller,
  Inject,
  Post,
  Res,
} from '@nestjs/common';
import { TypeOrmModule, InjectRepository } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Repository } from 'typeorm';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyService,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

/** A payment gateway that is down: every call answers 503. */
const gateway = { url: '', calls: 0 };
/** Runs of the route whose 400 carries a `Retry-After`. */
let busyRuns = 0;
/** Holds a nested run's key while a test needs it held. */
let holding = new Barrier();

@Controller('later')
class RetryLaterController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    @Inject(IdempotencyContext) private readonly context: IdempotencyContext,
    @Inject(IdempotencyService)
    private readonly idempotency: IdempotencyService,
  ) {}

  /** Calls the gateway that is down: the module's 503 downstream-unavailable. */
  @Post('charge')
  @Idempotent({ storeErrors: () => true })
  async charge(@Body() body: { reference: string }) {
    await this.context.fetch('charge', `${gateway.url}/charge`, {
      method: 'POST',
      idempotency: { retry: { attempts: 2, baseDelayMs: 1, maxDelayMs: 2 } },
    });
    await this.orders.insert({ reference: body.reference });
    return { charged: true };
  }

  /** Holds `inner` (a run() of its own) until the test opens `holding`. */
  @Post('hold')
  hold(@Body() body: { inner: string }) {
    return this.idempotency.run({ key: body.inner }, async () => {
      await holding.wait();
      return { held: true };
    });
  }

  /** A nested run() of `inner`: the module's 409 while another holds it. */
  @Post('nested')
  @Idempotent({ storeErrors: true })
  async nested(@Body() body: { reference: string; inner: string }) {
    await this.orders.insert({ reference: body.reference });
    return this.idempotency.run({ key: body.inner }, async () => ({
      nested: true,
    }));
  }

  /** The application's own 400 that asks to come back later. */
  @Post('busy')
  @Idempotent({ storeErrors: true })
  busy(
    @Body() body: { reference: string },
    @Res({ passthrough: true })
    response: { header(name: string, value: string): unknown },
  ): never {
    busyRuns += 1;
    response.header('Retry-After', '5');
    throw new BadRequestException(`busy ${body.reference}`);
  }

  /** A returned 409 that asks to come back later. */
  @Post('returned-busy')
  @Idempotent()
  returnedBusy(
    @Res({ passthrough: true })
    response: {
      status(code: number): unknown;
      header(name: string, value: string): unknown;
    },
  ) {
    busyRuns += 1;
    response.status(409);
    response.header('Retry-After', '5');
    return { busy: true };
  }

  /** A 400 under an error policy that throws. */
  @Post('policy-throws')
  @Idempotent({
    storeErrors: () => {
      throw new Error('the policy failed');
    },
  })
  policyThrows(@Body() body: { reference: string }): never {
    throw new BadRequestException(`declined ${body.reference}`);
  }

  /** A 400 stored through a `redact` hook that throws `undefined`. */
  @Post('redact-throws')
  @Idempotent({
    storeErrors: true,
    redact: () => {
      throw undefined;
    },
  })
  redactThrows(@Body() body: { reference: string }): never {
    throw new BadRequestException(`declined ${body.reference}`);
  }
}

describe.each(PLATFORMS)(
  'error policy and retry-later answers (%s)',
  (platform) => {
    let target: TestApp;
    let server: Server;

    beforeAll(async () => {
      server = createServer((_request, response) => {
        gateway.calls += 1;
        response.statusCode = 503;
        response.end('down');
      });
      await new Promise<void>((resolve) =>
        server.listen(0, '127.0.0.1', resolve),
      );
      gateway.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      target = await startTestApp({
        platform,
        imports: [TypeOrmModule.forFeature([Order])],
        controllers: [RetryLaterController],
      });
    });
    afterAll(async () => {
      await target?.close();
      server?.close();
    });

    const record = (key: string) =>
      target.db.query<{ status: string }>(
        `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [key],
      );
    const orders = async (reference: string) =>
      (
        await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
          reference,
        ])
      ).length;

    it("never stores the module's 409 of a key in progress met by a nested run(): the retry completes", async () => {
      holding = new Barrier();
      const key = randomUUID();
      const inner = randomUUID();
      const held = send(target, '/later/hold', { body: { inner } });
      await holding.reached(1);
      const body = { reference: key, inner };
      const refused = await send(target, '/later/nested', { key, body });
      expect([refused.status, refused.headers.get('retry-after')]).toEqual([
        409,
        '1',
      ]);
      expect(await record(key)).toEqual([]);
      holding.open();
      expect((await held).status).toBe(201);
      const retry = await send(target, '/later/nested', { key, body });
      expect({
        status: retry.status,
        replayed: retry.headers.get('idempotent-replayed'),
        body: await retry.json(),
        // The nested run() replays what the holder's run of `inner` stored.
      }).toEqual({ status: 201, replayed: null, body: { held: true } });
      expect(await record(key)).toEqual([{ status: 'completed' }]);
      expect(await orders(key)).toBe(1);
    });

    it("never stores the module's 503 of a downstream service unavailable, even when the policy accepts it: the retry calls it again", async () => {
      const key = randomUUID();
      const calls = gateway.calls;
      const first = await send(target, '/later/charge', {
        key,
        body: { reference: key },
      });
      expect(first.status).toBe(503);
      // Not stored: the key stays bound to this request by its step (the
      // gateway call), free to its retry at once.
      expect(await record(key)).toEqual([{ status: 'in_progress' }]);
      const retry = await send(target, '/later/charge', {
        key,
        body: { reference: key },
      });
      expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([
        503,
        null,
      ]);
      // Two attempts each: the retry ran the handler again.
      expect(gateway.calls - calls).toBe(4);
      expect(await record(key)).toEqual([{ status: 'in_progress' }]);
      expect(await orders(key)).toBe(0);
    });

    it.each([
      ['thrown under storeErrors: true', 'busy', 400],
      ['returned', 'returned-busy', 409],
    ])(
      'never stores an error answer with a Retry-After, %s: the retry runs again',
      async (_how, route, status) => {
        const key = randomUUID();
        const runs = busyRuns;
        for (let attempt = 1; attempt <= 2; attempt += 1) {
          const answer = await send(target, `/later/${route}`, {
            key,
            body: { reference: key },
          });
          expect([
            answer.status,
            answer.headers.get('retry-after'),
            answer.headers.get('idempotent-replayed'),
          ]).toEqual([status, '5', null]);
          expect(await record(key)).toEqual([]);
        }
        expect(busyRuns - runs).toBe(2);
      },
    );

    it.each(['redact-throws', 'policy-throws'])(
      'answers and frees the key when a hook of the error policy throws (/later/%s)',
      async (route) => {
        const key = randomUUID();
        for (let attempt = 1; attempt <= 2; attempt += 1) {
          const answer = await send(target, `/later/${route}`, {
            key,
            body: { reference: key },
            signal: AbortSignal.timeout(20_000),
          });
          expect([
            answer.status,
            answer.headers.get('idempotent-replayed'),
          ]).toEqual([400, null]);
          // Nothing is stored: the key is free at once.
          expect(await record(key)).toEqual([]);
        }
      },
    );
  },
);
