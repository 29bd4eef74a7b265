import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';

type Conditional = (
  data: Record<string, unknown>,
  existing: Record<string, unknown> | undefined,
) => (Error & { body?: Record<string, unknown> }) | null | undefined;

const require = createRequire(import.meta.url);
const dynalite = require('dynalite') as (options: {
  createTableMs?: number;
  deleteTableMs?: number;
  updateTableMs?: number;
}) => Server;
const db = require('dynalite/db/index.js') as {
  checkConditional: Conditional;
};
// dynalite drops the parameters it does not know before its actions run.
for (const action of ['putItem', 'updateItem', 'deleteItem']) {
  const validation = require(`dynalite/validations/${action}.js`) as {
    types: Record<string, unknown>;
  };
  validation.types.ReturnValuesOnConditionCheckFailure = {
    type: 'String',
    enum: ['ALL_OLD', 'NONE'],
  };
}

/**
 * Whether dynalite returns the item with a refused condition, as DynamoDB
 * does for `ReturnValuesOnConditionCheckFailure: 'ALL_OLD'` (since 2023):
 * dynalite 4 predates that parameter and ignores it, so the helper teaches it
 * (the same error, with the service's `Item` member); false shows a server
 * without it.
 */
export const dynaliteFeatures = { returnItemOnConditionFailure: true };

const checkConditional = db.checkConditional;
db.checkConditional = (data, existing) => {
  const error = checkConditional(data, existing);
  if (
    error?.body &&
    existing &&
    dynaliteFeatures.returnItemOnConditionFailure &&
    data.ReturnValuesOnConditionCheckFailure === 'ALL_OLD'
  ) {
    error.body = { ...error.body, Item: existing };
  }
  return error;
};

/** A dynalite server started in this process, and a client of it. */
export interface LocalDynamoDb {
  readonly endpoint: string;
  /** A new client of the server (fake credentials, region `local`). */
  client(): DynamoDBClient;
  close(): Promise<void>;
}

/** Starts dynalite (in memory) on a free port. */
export async function startDynalite(): Promise<LocalDynamoDb> {
  const server = dynalite({
    createTableMs: 0,
    deleteTableMs: 0,
    updateTableMs: 0,
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clients: DynamoDBClient[] = [];
  return {
    endpoint,
    client() {
      const client = new DynamoDBClient({
        endpoint,
        region: 'local',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      });
      clients.push(client);
      return client;
    },
    async close() {
      for (const client of clients) {
        client.destroy();
      }
      await new Promise<void>((resolve, reject) =>
        server.close((error) => (error ? reject(error) : resolve())),
      );
    },
  };
}
