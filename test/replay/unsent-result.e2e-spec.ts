/**
 * A handler that returned, whose answer then failed before it was sent: a
 * result the platform cannot serialize (a back reference, as an ORM
 * entity's two-way relation has), or an interceptor outside the module's
 * that throws on the result. The client gets a 500, but the handler's
 * effects happened. On a store that completes after the handler (memory,
 * Redis, DynamoDB) they stay, so the key is kept as not replayable: its
 * retry gets the 500's status replayed without a body, never a second run.
 * On PostgreSQL the handler's writes roll back with the record, and the
 * key is free: its retry runs, and nothing of either run stays.
 */
import {
  Controller,
  Headers,
  Injectable,
  InternalServerErrorException,
  Module,
  Post,
  Req,
  StreamableFile,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import { map, type Observable } from 'rxjs';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import {
  dynamoSubject,
  memorySubject,
  redisSubject,
  type Subject,
} from '../utils/store-subjects.js';
import {
  PLATFORMS,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';

@Injectable()
class Ledger {
  charges = 0;
  /** Where the `left` handler waits. */
  gate = new Barrier();
  /** Reached once the server saw the `left` request's client leave. */
  closed = new Barrier();
}

@Controller('unsent')
class ChargesController {
  constructor(private readonly ledger: Ledger) {}

  /** An effect, then a result with a back reference to itself. */
  @Post('cyclic')
  @Idempotent()
  cyclic() {
    this.ledger.charges += 1;
    const charge: Record<string, unknown> = { id: this.ledger.charges };
    charge.self = charge;
    return charge;
  }

  /** An effect, then a result the outer interceptor refuses. */
  @Post('refused')
  @Idempotent()
  refused() {
    this.ledger.charges += 1;
    return { id: this.ledger.charges, refuse: true };
  }

  /**
   * Waits at `gate` (after the server saw its client leave, when the test
   * aborts the request), then makes its effect and returns.
   */
  @Post('left')
  // A retry sent before the first attempt settled waits for it.
  @Idempotent({ concurrency: 'wait' })
  async left(@Req() request: { socket?: Socket; raw?: { socket?: Socket } }) {
    const socket = request.raw?.socket ?? request.socket;
    socket?.once('close', () => void this.ledger.closed.wait());
    await this.ledger.gate.wait();
    this.ledger.charges += 1;
    return { id: this.ledger.charges };
  }

  /** As `left`, with a stream for its answer. */
  @Post('left-stream')
  @Idempotent({ concurrency: 'wait' })
  async leftStream(
    @Req() request: { socket?: Socket; raw?: { socket?: Socket } },
  ) {
    await this.left(request);
    return new StreamableFile(Readable.from([Buffer.from('streamed')]));
  }

  /** An effect and a result that goes out. */
  @Post('plain')
  @Idempotent()
  plain() {
    this.ledger.charges += 1;
    return { id: this.ledger.charges };
  }
}

/**
 * Checks every answer on its way out, outside the module's interceptor (as a
 * response-schema check does): a result it refuses is a 500.
 */
@Injectable()
class OutgoingCheck implements NestInterceptor {
  intercept(
    _context: ExecutionContext,
    next: CallHandler,
  ): Observable<unknown> {
    return next.handle().pipe(
      map((value: unknown) => {
        if ((value as { refuse?: boolean } | undefined)?.refuse) {
          throw new InternalServerErrorException('The answer failed its check');
        }
        return value;
      }),
    );
  }
}

@Module({
  controllers: [ChargesController],
  providers: [Ledger],
})
class ChargesModule {}

const STORES: Array<[string, () => Promise<Subject>]> = [
  ['memory', memorySubject],
  ['redis', redisSubject],
  ['dynamodb', dynamoSubject],
];

describe.each(
  STORES.flatMap(([name, subjectOf]) =>
    PLATFORMS.map(
      (platform) =>
        [name, platform, subjectOf] as [
          string,
          Platform,
          () => Promise<Subject>,
        ],
    ),
  ),
)(
  'an answer that fails after its handler returned, on %s (%s)',
  (_name, platform, subjectOf) => {
    let subject: Subject;
    let target: StoreApp;

    beforeAll(async () => {
      subject = await subjectOf();
      target = await startStoreApp({
        store: subject.store,
        imports: [ChargesModule],
        // In the application's root module: Nest runs it outside the
        // idempotency module's own interceptor.
        providers: [{ provide: APP_INTERCEPTOR, useClass: OutgoingCheck }],
        platform,
      });
    });
    afterAll(async () => {
      await target?.close();
      await subject?.close();
    });

    const post = async (route: string, key: string) => {
      const response = await fetch(`${target.url}/unsent/${route}`, {
        method: 'POST',
        headers: { 'idempotency-key': key },
      });
      return {
        status: response.status,
        replayed: response.headers.get('idempotent-replayed'),
        omitted: response.headers.get('idempotent-body-omitted'),
        body: await response.text(),
      };
    };

    it.each(['cyclic', 'refused'])(
      'runs %s once: the retry gets the 500 replayed without a body, never a second charge',
      async (route) => {
        const ledger = target.app.get(Ledger);
        const key = randomUUID();
        const before = ledger.charges;
        const first = await post(route, key);
        expect(first.status).toBe(500);
        expect(first.replayed).toBeNull();
        const retry = await post(route, key);
        expect(retry).toEqual({
          status: 500,
          replayed: 'true',
          omitted: 'true',
          body: '',
        });
        expect(ledger.charges - before).toBe(1);
      },
    );

    /**
     * Sends `route` under `key`, and leaves (aborts) while its handler waits
     * at the ledger's gate; lets the handler go on once the server saw the
     * client leave.
     */
    const leaveWhileRunning = async (route: string, key: string) => {
      const ledger = target.app.get(Ledger);
      ledger.gate = new Barrier();
      ledger.closed = new Barrier();
      const abort = new AbortController();
      const first = fetch(`${target.url}/unsent/${route}`, {
        method: 'POST',
        headers: { 'idempotency-key': key },
        signal: abort.signal,
      }).catch(() => 'aborted');
      await ledger.gate.reached();
      abort.abort();
      await ledger.closed.reached();
      ledger.gate.open();
      expect(await first).toBe('aborted');
    };

    it('stores the answer of a handler whose client left while it ran: the retry gets it replayed, never a second charge', async () => {
      const ledger = target.app.get(Ledger);
      const key = randomUUID();
      const before = ledger.charges;
      await leaveWhileRunning('left', key);
      const retry = await post('left', key);
      expect(retry).toEqual({
        status: 201,
        replayed: 'true',
        omitted: null,
        body: JSON.stringify({ id: before + 1 }),
      });
      expect(ledger.charges - before).toBe(1);
    });

    it('keeps the key of a stream whose client left while its handler ran: the retry gets its status without a body, never a second charge', async () => {
      const ledger = target.app.get(Ledger);
      const key = randomUUID();
      const before = ledger.charges;
      await leaveWhileRunning('left-stream', key);
      expect(await post('left-stream', key)).toEqual({
        status: 201,
        replayed: 'true',
        omitted: 'true',
        body: '',
      });
      expect(ledger.charges - before).toBe(1);
    });

    it('still replays a result that went out', async () => {
      const ledger = target.app.get(Ledger);
      const key = randomUUID();
      const before = ledger.charges;
      const first = await post('plain', key);
      expect(first.status).toBe(201);
      const retry = await post('plain', key);
      expect(retry).toEqual({
        status: 201,
        replayed: 'true',
        omitted: null,
        body: first.body,
      });
      expect(ledger.charges - before).toBe(1);
    });
  },
);

@Controller('unsent-orders')
class OrdersController {
  runs = 0;

  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post('cyclic')
  @Idempotent()
  async cyclic(@Headers('idempotency-key') key: string) {
    this.runs += 1;
    const order: Record<string, unknown> = {
      ...(await this.orders.save({ reference: key })),
    };
    order.self = order;
    return order;
  }

  @Post('refused')
  @Idempotent()
  async refused(@Headers('idempotency-key') key: string) {
    this.runs += 1;
    return { ...(await this.orders.save({ reference: key })), refuse: true };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [OrdersController],
})
class OrdersModule {}

describe.each(PLATFORMS)(
  'an answer that fails after its handler returned, on PostgreSQL (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        imports: [OrdersModule],
        providers: [{ provide: APP_INTERCEPTOR, useClass: OutgoingCheck }],
        platform,
      });
    });
    afterAll(() => target?.close());

    it.each(['cyclic', 'refused'])(
      'rolls %s back with its record: the retry runs, and no order of either run stays',
      async (route) => {
        const controller = target.app.get(OrdersController);
        const key = randomUUID();
        const before = controller.runs;
        const post = () =>
          fetch(`${target.url}/unsent-orders/${route}`, {
            method: 'POST',
            headers: { 'idempotency-key': key },
          });
        const first = await post();
        expect(first.status).toBe(500);
        const retry = await post();
        expect(retry.status).toBe(500);
        expect(retry.headers.get('idempotent-replayed')).toBeNull();
        expect(controller.runs - before).toBe(2);
        expect(
          await target.dataSource
            .getRepository(Order)
            .countBy({ reference: key }),
        ).toBe(0);
      },
    );
  },
);
