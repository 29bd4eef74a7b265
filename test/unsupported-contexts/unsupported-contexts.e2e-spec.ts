import { TypeOrmModule } from '@nestjs/typeorm';
import { WsAdapter } from '@nestjs/platform-ws';
import { IdempotencyConfigurationError } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import {
  send,
  startTestApp,
  type TestApp,
  type TestAppOptions,
} from '../utils/test-app.js';
import {
  graphqlModule,
  OrdersArchiver,
  OrdersController,
  OrdersGateway,
  OrdersImporter,
  OrdersReport,
  RefundsController,
} from './unsupported-contexts.module.js';

/** The error an application fails to start with; it must not start. */
async function bootstrapError(options: TestAppOptions): Promise<Error> {
  let target: TestApp;
  try {
    target = await startTestApp(options);
  } catch (error) {
    return error as Error;
  }
  await target.close();
  throw new Error('The application started');
}

describe('@Idempotent() where the module does nothing', () => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  it('a GraphQL app without the decorator starts and answers a mutation', async () => {
    target = await startTestApp({ imports: [graphqlModule()] });
    const answer = await send(target, '/graphql', {
      body: {
        query: 'mutation { placeOrder(reference: "gql-1") { reference } }',
      },
    });
    expect(answer.status).toBe(200);
    expect(await answer.json()).toEqual({
      data: { placeOrder: { reference: 'gql-1' } },
    });
    const rows = await target.db.query(
      `SELECT 1 FROM orders WHERE reference = 'gql-1'`,
    );
    expect(rows).toHaveLength(1);
  });

  it.each<[string, TestAppOptions, string]>([
    [
      'a GraphQL query',
      { imports: [graphqlModule('query')] },
      'OrdersResolver.orderCount (a GraphQL query, subscription or field resolver)',
    ],
    [
      'a GraphQL subscription',
      { imports: [graphqlModule('subscription')] },
      'OrdersResolver.orderPlaced (a GraphQL query, subscription or field resolver)',
    ],
    [
      'a GraphQL field resolver',
      { imports: [graphqlModule('field')] },
      'OrdersResolver.label (a GraphQL query, subscription or field resolver)',
    ],
    [
      'a GraphQL resolver class without mutations',
      { imports: [graphqlModule('class')] },
      'class OrdersResolver (no route, message or mutation handler)',
    ],
    [
      'a WebSocket gateway message handler',
      {
        providers: [OrdersGateway],
        configure: (app) => app.useWebSocketAdapter(new WsAdapter(app)),
      },
      'OrdersGateway.placeOrder (a WebSocket gateway message handler)',
    ],
    [
      'a provider method',
      { providers: [OrdersImporter] },
      'OrdersImporter.importOrder (not a route or message handler)',
    ],
    [
      'a provider class without handlers',
      { providers: [OrdersArchiver] },
      'class OrdersArchiver (no route, message or mutation handler)',
    ],
    [
      'a scheduled job',
      { providers: [OrdersReport] },
      'OrdersReport.nightly (a scheduled job)',
    ],
    [
      'a controller method that is not a route handler',
      { controllers: [RefundsController] },
      'RefundsController.record (not a route or message handler)',
    ],
  ])(
    'refuses to start with @Idempotent() on %s, naming it and IdempotencyService.run()',
    async (_, options, where) => {
      const error = await bootstrapError(options);
      expect(error).toBeInstanceOf(IdempotencyConfigurationError);
      expect(error.message).toContain(
        `@Idempotent() has no effect on ${where}`,
      );
      expect(error.message).toContain('IdempotencyService.run()');
      expect(error.message).toContain('run({ scope, key }, fn)');
    },
  );

  it('starts with @Idempotent() on a controller class with a helper method, and its route is idempotent', async () => {
    target = await startTestApp({
      imports: [TypeOrmModule.forFeature([Order])],
      controllers: [OrdersController],
    });
    const request = { key: 'class-1', body: { reference: ' class-1 ' } };
    const first = await send(target, '/orders', request);
    expect(first.status).toBe(201);
    const replay = await send(target, '/orders', request);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe(await first.text());
    const rows = await target.db.query(
      `SELECT 1 FROM orders WHERE reference = 'class-1'`,
    );
    expect(rows).toHaveLength(1);
  });
});
