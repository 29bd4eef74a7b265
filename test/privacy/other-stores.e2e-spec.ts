import { randomBytes, randomUUID } from 'node:crypto';
import { serialize } from 'node:v8';
import { ScanCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { Redis } from 'ioredis';
import {
  MemoryIdempotencyStore,
  type IdempotencyStore,
} from '../../src/index.js';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { startDynalite } from '../utils/dynalite.js';
import { keysOf } from '../utils/redis-server.js';
import { describeWithServer } from '../utils/server.js';
import { REDIS } from '../utils/store-subjects.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import { PLATFORMS, type Platform } from '../utils/test-app.js';
import { PrivacyController, PrivacyRuns, SECRETS } from './privacy.module.js';

/** Whether `dump` holds a secret as text, hex or base64. */
function expectNoSecret(dump: Buffer): void {
  for (const secret of Object.values(SECRETS)) {
    const bytes = Buffer.from(secret);
    for (const form of [
      bytes,
      Buffer.from(bytes.toString('hex')),
      Buffer.from(bytes.toString('base64').slice(0, 12)),
    ]) {
      expect(dump.includes(form)).toBe(false);
    }
  }
}

/**
 * Stores no plaintext, replays exactly, and refuses a record it cannot open,
 * on a store other than PostgreSQL; `dump` reads everything the store holds.
 */
interface SealedSubject {
  store: IdempotencyStore;
  dump(): Promise<Buffer>;
  close(): Promise<void>;
}

function sealedOn(
  platform: Platform,
  storeOf: () => SealedSubject | Promise<SealedSubject>,
) {
  let subject: SealedSubject;
  let target: StoreApp;
  let other: StoreApp;
  let runs: PrivacyRuns;

  beforeAll(async () => {
    subject = await storeOf();
    const app = (key: Buffer) =>
      startStoreApp({
        store: subject.store,
        platform,
        idempotency: { encryption: { keys: { k: key }, current: 'k' } },
        controllers: [PrivacyController],
        providers: [PrivacyRuns],
      });
    target = await app(randomBytes(32));
    other = await app(randomBytes(32));
    runs = target.app.get(PrivacyRuns);
  });
  afterAll(async () => {
    await other?.close();
    await target?.close();
    await subject?.close();
  });

  const post = (app: StoreApp, path: string, key: string) =>
    fetch(`${app.url}${path}`, {
      method: 'POST',
      headers: { 'Idempotency-Key': key },
    });

  it('holds no plaintext of a body, a header or a step result; replays exactly; a ring without the key answers 503', async () => {
    const key = randomUUID();
    const first = await post(target, '/privacy/card', key);
    const firstBody = Buffer.from(await first.arrayBuffer());
    expect(first.status).toBe(201);
    runs.failSteps = true;
    const stepKey = randomUUID();
    expect((await post(target, '/privacy/steps', stepKey)).status).toBe(500);
    expectNoSecret(await subject.dump());

    const replay = await post(target, '/privacy/card', key);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(Buffer.from(await replay.arrayBuffer()).equals(firstBody)).toBe(
      true,
    );
    const retried = await post(target, '/privacy/steps', stepKey);
    expect(await retried.json()).toEqual({ charge: { token: SECRETS.token } });
    expect(runs.charges).toBe(1);

    const refused = await post(other, '/privacy/card', key);
    expect(refused.status).toBe(503);
    expect(await refused.text()).not.toContain(SECRETS.holder);
    expect(runs.card + other.app.get(PrivacyRuns).card).toBe(1);
  });
}

describe.each(PLATFORMS)('encryption on the in-memory store (%s)', (platform) =>
  sealedOn(platform, () => {
    const store = new MemoryIdempotencyStore();
    const held = store as unknown as { records: unknown; steps: unknown };
    return {
      store,
      dump: () => Promise.resolve(serialize([held.records, held.steps])),
      close: () => Promise.resolve(),
    };
  }),
);

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

describeRedis.each(PLATFORMS)(
  'encryption on the Redis store (%s)',
  (platform) =>
    sealedOn(platform, () => {
      const prefix = `idempotency-privacy-${randomUUID().slice(0, 8)}:`;
      const client = new Redis(REDIS);
      return {
        store: new RedisIdempotencyStore(client, { prefix }),
        async dump() {
          const parts: Buffer[] = [];
          for (const key of await keysOf(client, prefix)) {
            const type = await client.type(key);
            if (type === 'string') {
              parts.push((await client.getBuffer(key)) ?? Buffer.alloc(0));
            } else if (type === 'hash') {
              const fields = await client.hgetallBuffer(key);
              parts.push(...Object.values(fields));
            } else {
              parts.push(Buffer.from(JSON.stringify(await client.dump(key))));
            }
          }
          expect(parts.length).toBeGreaterThan(0);
          return Buffer.concat(parts);
        },
        async close() {
          const all = await keysOf(client, prefix);
          if (all.length > 0) {
            await client.del(...all);
          }
          await client.quit();
        },
      };
    }),
);

/** Every value of a DynamoDB attribute: text as UTF-8, binary as its bytes. */
function attributeBytes(value: AttributeValue): Buffer[] {
  if (value.B) {
    return [Buffer.from(value.B)];
  }
  if (value.M) {
    return Object.values(value.M).flatMap(attributeBytes);
  }
  if (value.L) {
    return value.L.flatMap(attributeBytes);
  }
  return [Buffer.from(JSON.stringify(value))];
}

describe.each(PLATFORMS)('encryption on the DynamoDB store (%s)', (platform) =>
  sealedOn(platform, async () => {
    const dynamo = await startDynalite();
    const client = dynamo.client();
    const tableName = 'idempotency_privacy';
    await DynamoDbIdempotencyStore.createTable(client, {
      tableName,
      timeToLive: false,
    });
    return {
      store: new DynamoDbIdempotencyStore(client, { tableName }),
      async dump() {
        const { Items = [] } = await client.send(
          new ScanCommand({ TableName: tableName, ConsistentRead: true }),
        );
        expect(Items.length).toBeGreaterThan(0);
        return Buffer.concat(
          Items.flatMap((item) => Object.values(item).flatMap(attributeBytes)),
        );
      },
      close: () => dynamo.close(),
    };
  }),
);
