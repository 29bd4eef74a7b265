import { randomUUID } from 'node:crypto';
import { ScanCommand } from '@aws-sdk/client-dynamodb';
import { Redis } from 'ioredis';
import {
  MemoryIdempotencyStore,
  type IdempotencyStore,
} from '../../src/index.js';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { startDynalite } from './dynalite.js';
import { keysOf, RedisServer, VALKEY_BINARIES } from './redis-server.js';

/** A store under test, the records it holds, and how to let it go. */
export interface Subject {
  readonly store: IdempotencyStore;
  /** How many records (finished or claimed) the store holds. */
  records(): Promise<number>;
  /**
   * How an application process of its own reaches the same store (see
   * test/stores/typeorm-free-app.js); none for the memory store.
   */
  readonly env?: Readonly<Record<string, string>>;
  close(): Promise<void>;
}

export const memorySubject = (): Promise<Subject> => {
  const store = new MemoryIdempotencyStore();
  return Promise.resolve({
    store,
    records: () => Promise.resolve(store.size),
    close: () => Promise.resolve(),
  });
};

export const REDIS = { host: '127.0.0.1', port: 6379 };

/** A Redis store on a prefix of its own, on the local Redis. */
export const redisSubject = (): Promise<Subject> => redisSubjectAt(REDIS);

/**
 * A Redis store on a Valkey server of its own, started from valkey-server
 * (see VALKEY_BINARIES), stopped on close.
 */
export const valkeySubject = async (): Promise<Subject> => {
  const server = await (
    await RedisServer.create([], { binaries: VALKEY_BINARIES })
  ).start();
  const subject = await redisSubjectAt({
    host: '127.0.0.1',
    port: server.port,
  });
  return {
    ...subject,
    async close() {
      try {
        await subject.close();
      } finally {
        await server.stop();
      }
    },
  };
};

/** A Redis store on a prefix of its own, on the server at `address`. */
function redisSubjectAt(address: typeof REDIS): Promise<Subject> {
  const prefix = `idempotency-test-app-${randomUUID().slice(0, 8)}:`;
  const client = new Redis(address);
  const keys = () => keysOf(client, prefix);
  return Promise.resolve({
    store: new RedisIdempotencyStore(client, { prefix }),
    env: {
      STORE: 'redis',
      REDIS_URL: `redis://${address.host}:${address.port}`,
      REDIS_PREFIX: prefix,
    },
    records: async () =>
      (await keys()).filter((key) => key.endsWith(':record')).length,
    async close() {
      const all = await keys();
      if (all.length > 0) {
        await client.del(...all);
      }
      await client.quit();
    },
  });
}

/** A DynamoDB store on a dynalite server of its own. */
export const dynamoSubject = async (): Promise<Subject> => {
  const dynamo = await startDynalite();
  const client = dynamo.client();
  await DynamoDbIdempotencyStore.createTable(client, { timeToLive: false });
  return {
    store: new DynamoDbIdempotencyStore(client),
    env: { STORE: 'dynamodb', DYNAMODB_ENDPOINT: dynamo.endpoint },
    records: async () =>
      (
        await client.send(
          new ScanCommand({
            TableName: 'idempotency_records',
            Select: 'COUNT',
            ConsistentRead: true,
          }),
        )
      ).Count ?? 0,
    close: () => dynamo.close(),
  };
};
