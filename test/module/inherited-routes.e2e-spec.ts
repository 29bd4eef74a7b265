import { Body, Controller, Module, Post } from '@nestjs/common';
import type { INestApplication, Type } from '@nestjs/common';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { answer } from '../utils/problems.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

/**
 * One route method, declared once on a base class and inherited by three
 * controllers: each controller's decorator (or none) decides for its own
 * route, whichever controller the module meets first.
 */
abstract class OrdersBase {
  constructor(protected readonly orders: Repository<Order>) {}

  @Post()
  async create(@Body() body: { reference: string }) {
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference }),
    );
    return { id: order.id };
  }
}

/** Not idempotent. */
@Controller('drafts')
class DraftsController extends OrdersBase {
  constructor(@InjectRepository(Order) orders: Repository<Order>) {
    super(orders);
  }
}

/** Idempotent, a key required. */
@Controller('payments')
@Idempotent()
class PaymentsController extends OrdersBase {
  constructor(@InjectRepository(Order) orders: Repository<Order>) {
    super(orders);
  }
}

/** Idempotent, a key optional. */
@Controller('refunds')
@Idempotent({ required: false })
class RefundsController extends OrdersBase {
  constructor(@InjectRepository(Order) orders: Repository<Order>) {
    super(orders);
  }
}

interface Operation {
  parameters?: { name: string; in: string; required?: boolean }[];
  responses: Record<string, { description: string; headers?: object }>;
}

const MODULE_STATUSES = ['400', '409', '415', '422', '503'];

const ORDERS: ReadonlyArray<readonly [string, Type[]]> = [
  [
    'the undecorated controller first',
    [DraftsController, PaymentsController, RefundsController],
  ],
  [
    'the undecorated controller last',
    [RefundsController, PaymentsController, DraftsController],
  ],
];

describe.each(ORDERS)(
  'a route method inherited by decorated and undecorated controllers (%s)',
  (_, controllers) => {
    @Module({
      imports: [TypeOrmModule.forFeature([Order])],
      controllers,
    })
    class InheritedRoutesModule {}

    describe.each(
      PLATFORMS.flatMap((platform) =>
        [true, false].map((openApi) => [platform, openApi] as const),
      ),
    )('%s, openApi: %s', (platform, openApi) => {
      let target: TestApp;
      let paths: Record<string, { post: Operation }>;
      beforeAll(async () => {
        const configure = (app: INestApplication) => {
          paths = SwaggerModule.createDocument(
            app,
            new DocumentBuilder().build(),
          ).paths as unknown as typeof paths;
        };
        target = await startTestApp({
          platform,
          imports: [InheritedRoutesModule],
          idempotency: { gc: false, openApi },
          configure,
        });
      });
      afterAll(async () => {
        await target.close();
      });

      const rows = async (reference: string) =>
        (
          await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
            reference,
          ])
        ).length;

      it('runs the decorated route once per key, and refuses it without one', async () => {
        const first = await answer(
          send(target, '/payments', {
            key: 'pay-1',
            body: { reference: 'pay-1' },
          }),
        );
        expect(first).toMatchObject({ status: 201, replayed: false });
        const second = await answer(
          send(target, '/payments', {
            key: 'pay-1',
            body: { reference: 'pay-1' },
          }),
        );
        expect(second).toEqual({ ...first, replayed: true });
        expect(await rows('pay-1')).toBe(1);

        const keyless = await answer(
          send(target, '/payments', { body: { reference: 'pay-none' } }),
        );
        expect(keyless).toMatchObject({
          status: 400,
          replayed: false,
          body: {
            type: 'urn:idempotency:missing-key',
            title: 'Idempotency key missing',
            status: 400,
            detail: 'This operation requires an "Idempotency-Key" header.',
          },
        });
        expect(await rows('pay-none')).toBe(0);
      });

      it('runs the route of the other decorated controller with its own options (a key optional)', async () => {
        const keyless = await answer(
          send(target, '/refunds', { body: { reference: 'refund-none' } }),
        );
        expect(keyless).toMatchObject({ status: 201, replayed: false });
        const first = await answer(
          send(target, '/refunds', {
            key: 'refund-1',
            body: { reference: 'refund-1' },
          }),
        );
        const second = await answer(
          send(target, '/refunds', {
            key: 'refund-1',
            body: { reference: 'refund-1' },
          }),
        );
        expect(first).toMatchObject({ status: 201, replayed: false });
        expect(second).toEqual({ ...first, replayed: true });
        expect(await rows('refund-1')).toBe(1);
      });

      it('leaves the undecorated route alone: it runs each time, with or without a key', async () => {
        for (const key of [undefined, undefined, 'draft-key', 'draft-key']) {
          const sent = await answer(
            send(target, '/drafts', { key, body: { reference: 'draft' } }),
          );
          expect(sent).toMatchObject({
            status: 201,
            replayed: false,
            body: { id: expect.any(Number) as number },
          });
        }
        expect(await rows('draft')).toBe(4);
      });

      it(
        openApi
          ? 'documents the key header and the problem responses on the decorated routes only'
          : 'documents nothing with openApi: false',
        () => {
          const keyHeaders = (path: string) =>
            (paths[path].post.parameters ?? []).filter(
              (parameter) => parameter.name === 'Idempotency-Key',
            );
          const statuses = (path: string) =>
            Object.keys(paths[path].post.responses).sort();
          if (!openApi) {
            for (const path of ['/payments', '/refunds', '/drafts']) {
              expect(keyHeaders(path)).toEqual([]);
              expect(statuses(path)).toEqual(['201']);
            }
            return;
          }
          expect(keyHeaders('/payments')).toMatchObject([
            { in: 'header', required: true },
          ]);
          expect(keyHeaders('/refunds')).toMatchObject([
            { in: 'header', required: false },
          ]);
          for (const path of ['/payments', '/refunds']) {
            expect(statuses(path)).toEqual(['201', ...MODULE_STATUSES]);
          }
          expect(
            paths['/payments'].post.responses['400'].description,
          ).toContain('missing-key');
          expect(
            paths['/refunds'].post.responses['400'].description,
          ).not.toContain('missing-key');
          expect(
            Object.keys(paths['/payments'].post.responses['201'].headers ?? {}),
          ).toContain('Idempotent-Replayed');
          expect(keyHeaders('/drafts')).toEqual([]);
          expect(paths['/drafts'].post.responses).toEqual({
            '201': { description: '' },
          });
        },
      );
    });
  },
);
