import { Body, Controller, Module, Post, Res } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { until } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

/**
 * Handlers that send their response themselves, under
 * `@Res({ passthrough: true })`: the answer leaves before the module's
 * commit, so the module can no longer hold it.
 */
@Controller('sent')
class SentItselfController {
  runs = 0;

  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  private async order(reference: string): Promise<number> {
    this.runs += 1;
    const order = await this.orders.save(
      this.orders.create({ reference, source: 'sent' }),
    );
    return order.id;
  }

  @Post('json')
  @Idempotent()
  async json(
    @Body() body: { reference: string },
    @Res({ passthrough: true }) res: unknown,
  ): Promise<void> {
    const id = await this.order(body.reference);
    this.adapterHost.httpAdapter.reply(res, { id }, 201);
  }

  @Post('refused')
  @Idempotent()
  async refused(
    @Body() body: { reference: string },
    @Res({ passthrough: true }) res: unknown,
  ): Promise<void> {
    await this.order(body.reference);
    this.adapterHost.httpAdapter.reply(res, { error: 'not yet' }, 409);
  }

  @Post('redirect')
  @Idempotent()
  async redirect(
    @Body() body: { reference: string },
    @Res({ passthrough: true }) res: unknown,
  ): Promise<void> {
    const id = await this.order(body.reference);
    this.adapterHost.httpAdapter.redirect(res, 303, `/orders/${id}`);
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [SentItselfController],
})
class SentItselfModule {}

describe.each(PLATFORMS)(
  'a handler that sends its response itself (%s)',
  (platform) => {
    let target: TestApp;
    let controller: SentItselfController;

    beforeAll(async () => {
      target = await startTestApp({ imports: [SentItselfModule], platform });
      controller = target.app.get(SentItselfController);
    });
    afterAll(() => target?.close());

    const orders = async (reference: string) =>
      (
        await target.db.query<{ id: number }>(
          'SELECT id FROM orders WHERE reference = $1',
          [reference],
        )
      ).map((row) => row.id);

    it.each([
      ['its JSON', 'json', 201],
      ['a redirect', 'redirect', 303],
    ] as const)(
      'commits the writes its answer (%s) told the client of, and a duplicate gets its status without running again',
      async (_what, route, status) => {
        const reference = `sent-${route}-${platform}`;
        const runs = controller.runs;
        const first = await send(target, `/sent/${route}`, {
          key: reference,
          body: { reference },
          redirect: 'manual',
        });
        expect(first.status).toBe(status);
        // The answer left before the commit: what it named exists once the
        // record is written, with it.
        await until(
          async () =>
            (
              await target.db.query(
                'SELECT 1 FROM idempotency_records WHERE key = $1 AND status <> $2',
                [reference, 'in_progress'],
              )
            ).length === 1,
          'the record of the request answered',
        );
        const ids = await orders(reference);
        expect(ids).toHaveLength(1);
        if (route === 'json') {
          expect(await first.json()).toEqual({ id: ids[0] });
        } else {
          expect(first.headers.get('location')).toBe(`/orders/${ids[0]}`);
        }
        expect(
          await target.db.query(
            'SELECT status, response_status FROM idempotency_records WHERE key = $1',
            [reference],
          ),
        ).toEqual([{ status: 'not_replayable', response_status: status }]);

        const duplicate = await send(target, `/sent/${route}`, {
          key: reference,
          body: { reference },
          redirect: 'manual',
        });
        expect({
          status: duplicate.status,
          omitted: duplicate.headers.get('idempotent-body-omitted'),
        }).toEqual({ status, omitted: 'true' });
        expect(controller.runs).toBe(runs + 1);
        expect(await orders(reference)).toEqual(ids);
      },
    );

    it('rolls back the writes of a handler that sent an error itself, and frees the key: the answer said not done', async () => {
      const reference = `sent-refused-${platform}`;
      const runs = controller.runs;
      const refused = await send(target, '/sent/refused', {
        key: reference,
        body: { reference },
      });
      expect(refused.status).toBe(409);
      await until(
        async () =>
          (
            await target.db.query(
              'SELECT 1 FROM idempotency_records WHERE key = $1',
              [reference],
            )
          ).length === 0,
        'the claim of the refused request to be released',
      );
      expect(await orders(reference)).toEqual([]);
      const again = await send(target, '/sent/refused', {
        key: reference,
        body: { reference },
      });
      expect(again.status).toBe(409);
      expect(controller.runs).toBe(runs + 2);
    });
  },
);
