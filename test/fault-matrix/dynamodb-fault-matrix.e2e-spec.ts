import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { DEFAULT_SCOPE } from '../../src/stores/index.js';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import {
  numberOf,
  partitionKey,
  stepsOf,
  stringOf,
  type Item,
} from '../../src/stores/dynamodb/dynamodb-item.js';
import { startDynalite, type LocalDynamoDb } from '../utils/dynalite.js';
import {
  HttpRequestFaults,
  type HttpRequestView,
} from '../utils/http-request-faults.js';
import type { Platform } from '../utils/test-app.js';
import {
  describeStoreMatrix,
  failingFastCells,
  resendingCells,
  type StorePoint,
  type StoreRecord,
  type StoreTarget,
} from './store-matrix.js';
import { startStorePayments } from './store-matrix.module.js';

const TABLE = 'idempotency_records';

/** A DynamoDB request as the store sends it. */
interface DynamoRequest {
  readonly operation: string;
  readonly pk: string | undefined;
  readonly input: {
    readonly UpdateExpression?: string;
    readonly ProjectionExpression?: string;
    readonly ExpressionAttributeValues?: Record<string, { S?: string }>;
  };
}

function dynamoRequest(request: HttpRequestView): DynamoRequest | undefined {
  const target = request.headers['x-amz-target'];
  if (typeof target !== 'string') {
    return undefined;
  }
  const input = JSON.parse(
    request.body.toString('utf8'),
  ) as DynamoRequest['input'] & {
    Key?: { pk?: { S?: string } };
  };
  return { operation: target.split('.')[1], pk: input.Key?.pk?.S, input };
}

/** The store's request of `point` for the item of partition key `pk`. */
function requestOf(
  point: StorePoint,
  pk: string,
): (request: HttpRequestView) => boolean {
  const update =
    (check: (expression: string, input: DynamoRequest['input']) => boolean) =>
    (request: HttpRequestView) => {
      const sent = dynamoRequest(request);
      return (
        sent?.operation === 'UpdateItem' &&
        sent.pk === pk &&
        check(sent.input.UpdateExpression ?? '', sent.input)
      );
    };
  const finishing = (status: string) =>
    update(
      (expression, input) =>
        expression.includes('REMOVE lease_expires_at, steps') &&
        input.ExpressionAttributeValues?.[':status']?.S === status,
    );
  switch (point) {
    case 'claim':
      return update((expression) =>
        expression.startsWith('SET #scope = :scope'),
      );
    case 'step read':
      return (request) => {
        const sent = dynamoRequest(request);
        return (
          sent?.operation === 'GetItem' &&
          sent.pk === pk &&
          sent.input.ProjectionExpression === 'steps.#step'
        );
      };
    // The write that stores the step: the store's first write is refused
    // when an earlier write bound the key longer (its hold was read a
    // moment later), and its second stores the step; a fault after the
    // first would be one before the step's save.
    case 'step save': {
      const saving = update((expression) =>
        expression.includes('steps.#step = :step'),
      );
      return (request) =>
        saving(request) &&
        (request.answered === undefined || request.answered === 200);
    }
    case 'completion':
      return finishing('completed');
    case 'stored error':
      return finishing('failed');
    // A key with a step is released by keeping its item, ownerless (its
    // DeleteItem, refused for the step, changes nothing; a release that
    // keeps the key's generation sends none).
    case 'release':
      return update((expression) =>
        expression.startsWith('SET lease_expires_at = :zero REMOVE #owner'),
      );
    case 'renewal':
      return update(
        (expression) => expression === 'SET lease_expires_at = :lease',
      );
  }
}

/**
 * The application on a DynamoDB store whose client (with `maxAttempts`)
 * reaches dynalite through a proxy that resets its connections.
 */
function dynamoTarget(maxAttempts: number) {
  return async (
    platform: Platform,
    gatewayUrl: string,
    leaseMs: number,
  ): Promise<StoreTarget<HttpRequestView>> => {
    const dynamo: LocalDynamoDb = await startDynalite();
    const direct = dynamo.client();
    await DynamoDbIdempotencyStore.createTable(direct, { timeToLive: false });
    const proxy = await new HttpRequestFaults(dynamo.endpoint).start();
    const client = new DynamoDBClient({
      endpoint: proxy.url,
      region: 'local',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      maxAttempts,
    });
    const app = await startStorePayments(
      platform,
      new DynamoDbIdempotencyStore(client),
      gatewayUrl,
      leaseMs,
    );
    const pkOf = (key: string) => partitionKey(DEFAULT_SCOPE, key);
    const item = async (key: string): Promise<Item | undefined> =>
      (
        await direct.send(
          new GetItemCommand({
            TableName: TABLE,
            Key: { pk: { S: pkOf(key) } },
            ConsistentRead: true,
          }),
        )
      ).Item;
    return {
      app: app.app,
      url: app.url,
      // Every request opens a connection if it has none: always ready.
      faults: proxy,
      callOf: (point, key) => requestOf(point, pkOf(key)),
      async record(key) {
        const found = await item(key);
        if (!found) {
          return undefined;
        }
        const state = stringOf(found.status) as StoreRecord['state'];
        if (state !== 'in_progress') {
          return {
            state,
            responseStatus: numberOf(found.response_status) ?? 0,
          };
        }
        // The store's leases are the application's clock.
        const leaseEnds = numberOf(found.lease_expires_at) ?? 0;
        return { state, leaseEnds, live: leaseEnds > Date.now() };
      },
      async steps(key) {
        const found = await item(key);
        return found ? [...stepsOf(found).keys()] : [];
      },
      snapshot: item,
      async close() {
        await app.close();
        client.destroy();
        await proxy.stop();
        await dynamo.close();
      },
    };
  };
}

describe('DynamoDB', () => {
  /*
   * The SDK's defaults (3 attempts): a request whose connection was reset
   * is sent again; one that took effect (its answer lost) runs twice. Its
   * own completion, sent again, finds the record it finished.
   */
  describeStoreMatrix({
    name: "DynamoDB (dynalite), the SDK's retries",
    start: dynamoTarget(3),
    cells: resendingCells({ resentCompletion: ['201'] }),
  });

  /*
   * A client without retries (`maxAttempts: 1`): the request fails, whether
   * it took effect or not. The next request opens a connection of its own:
   * the release that follows a failure goes through.
   */
  describeStoreMatrix({
    name: 'DynamoDB (dynalite), no retries',
    start: dynamoTarget(1),
    cells: failingFastCells({ releasedLate: false }),
  });
});
