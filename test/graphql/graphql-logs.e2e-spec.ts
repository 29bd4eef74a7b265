import { createHash } from 'node:crypto';
import type { IdempotencyModuleOptions } from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';
import {
  send,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import { CapturedLogger } from '../telemetry/captured-logger.js';
import {
  Gate,
  describeGraphqlServers,
  graphqlTestModule,
  type GraphqlDriver,
} from './graphql.module.js';

/** The claim function of the PostgreSQL store, renamed away for an outage. */
/** A column the claim writes: renamed, every claim fails (an outage). */
const RENAME_CLAIMED_COLUMN = (from: string, to: string) =>
  `ALTER TABLE idempotency_records RENAME COLUMN ${from} TO ${to}`;

const hash = (key: string) =>
  createHash('sha256').update(key).digest('hex').slice(0, 16);

/** A line of the module, its duration (which varies) left out. */
const withoutDuration = (line: string) =>
  line.replace(/ duration_ms=\d+/, ' duration_ms=…');

interface GraphqlAnswer {
  data?: Record<string, unknown> | null;
  errors?: Array<{ message: string; extensions?: Record<string, unknown> }>;
}

/** What one GraphQL server logs, through the application's own logger. */
function graphqlLogs(driver: GraphqlDriver, platform: Platform): void {
  let target: TestApp | undefined;
  let gate: Gate;
  const logger = new CapturedLogger();

  const start = async (idempotency: IdempotencyModuleOptions = {}) => {
    const app = await startTestApp({
      platform,
      imports: [await graphqlTestModule(driver)],
      idempotency: { gc: false, ...idempotency },
      configure: (nest) => nest.useLogger(logger),
    });
    target = app;
    gate = app.app.get(Gate);
    gate.barrier = new Barrier();
    logger.clear();
    return app;
  };
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  async function graphql(query: string, key?: string): Promise<GraphqlAnswer> {
    const response = await send(target!, '/graphql', {
      key,
      body: { query },
    });
    expect(response.status).toBe(200);
    return (await response.json()) as GraphqlAnswer;
  }

  const codes = (answer: GraphqlAnswer) =>
    answer.errors?.map((error) => error.extensions?.code);

  it('logs no ERROR for its refusals (409, 422, 400): they log at DEBUG as over REST, with the hash of the key', async () => {
    await start();
    const reference = `${driver}-${platform}-logs`;
    const gated = `mutation { placeOrderGated(reference: "${reference}") { id } }`;
    const first = graphql(gated, 'log-1');
    await gate.barrier.reached(1);
    expect(codes(await graphql(gated, 'log-1'))).toEqual([
      'IDEMPOTENCY_CONFLICT',
    ]);
    gate.barrier.open();
    expect(codes(await first)).toBeUndefined();
    expect(
      codes(
        await graphql(
          `mutation { placeOrderGated(reference: "${reference}-other") { id } }`,
          'log-1',
        ),
      ),
    ).toEqual(['IDEMPOTENCY_KEY_REUSED']);
    const placed = `mutation { placeOrder(reference: "${reference}") { id } }`;
    expect(codes(await graphql(placed))).toEqual(['IDEMPOTENCY_KEY_MISSING']);
    expect(codes(await graphql(placed, 'has space'))).toEqual([
      'IDEMPOTENCY_KEY_INVALID',
    ]);

    expect(logger.at('error')).toEqual([]);
    const key = hash('log-1#placeOrderGated');
    const route = 'method=MUTATION path="Mutation.placeOrderGated"';
    expect(logger.of('Idempotency').map(withoutDuration)).toEqual([
      `debug event=conflict ${route} status=409 key_hash=${key} duration_ms=…`,
      `debug event=executed ${route} status=200 key_hash=${key} duration_ms=…`,
      `debug event=mismatch ${route} status=422 key_hash=${key} duration_ms=…`,
    ]);
    expect(logger.lines.map((line) => line.context)).not.toContain(
      'ExceptionsHandler',
    );
  });

  it("still logs at ERROR, with its stack, what fails on the server: the store unreachable (503) and the resolver's own crash", async () => {
    const { db } = await start();
    const reference = `${driver}-${platform}-outage`;
    await db.query(RENAME_CLAIMED_COLUMN('owner_instance', 'instance_away'));
    let outage: GraphqlAnswer;
    try {
      outage = await graphql(
        `mutation { placeOrder(reference: "${reference}") { id } }`,
        'outage-1',
      );
    } finally {
      await db.query(RENAME_CLAIMED_COLUMN('instance_away', 'owner_instance'));
    }
    expect(codes(outage)).toEqual(['IDEMPOTENCY_UNAVAILABLE']);
    const crashed = await graphql(
      `
        mutation {
          placeOrderRefused(reference: "crash") {
            id
          }
        }
      `,
      `crash-${driver}-${platform}`,
    );
    expect(crashed.errors).toEqual([
      expect.objectContaining({ message: 'The stock service crashed' }),
    ]);

    expect(
      logger.at('error').map(({ context, message, stack }) => ({
        context,
        message,
        stack,
      })),
    ).toEqual([
      {
        context: 'ExceptionsHandler',
        message: `GraphQLError: ${outage.errors![0].message}`,
        stack: true,
      },
      {
        context: 'ExceptionsHandler',
        message: 'Error: The stock service crashed',
        stack: true,
      },
    ]);
  });

  it("shows the key itself with telemetry's keys: 'raw', with its scope", async () => {
    await start({ telemetry: { keys: 'raw' } });
    const reference = `${driver}-${platform}-raw`;
    const document = `mutation { placeOrder(reference: "${reference}") { id } }`;
    await graphql(document, 'raw-1');
    await graphql(
      `mutation { placeOrder(reference: "${reference}-other") { id } }`,
      'raw-1',
    );
    expect(logger.at('error')).toEqual([]);
    const fields =
      'method=MUTATION path="Mutation.placeOrder" status=__ scope="global" key="raw-1#placeOrder"';
    expect(logger.of('Idempotency').map(withoutDuration)).toEqual([
      `debug event=executed ${fields.replace('__', '200')} duration_ms=…`,
      `debug event=mismatch ${fields.replace('__', '422')} duration_ms=…`,
    ]);
  });
}

describeGraphqlServers('GraphQL logs', graphqlLogs);
