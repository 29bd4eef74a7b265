/**
 * A step's result larger than its store keeps (DynamoDB's item of 400 KB,
 * PostgreSQL's `jsonb` of 256 MiB): the step ran, its result cannot be
 * kept. The request gets a 500 (`step-result-too-large`) that says a retry
 * cannot succeed, never a 503 that asks for one, and every retry with the
 * same key gets it again without the step running: its effect happens
 * once. With `encryption`, a step's result on DynamoDB is sealed in bytes
 * (as responses are), so that it takes what its JSON takes, not a third
 * more; one sealed as base64 text by an earlier version still opens. Redis
 * keeps large results. Over real HTTP, on each store.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  GetItemCommand,
  UpdateItemCommand,
  type DynamoDBClient,
} from '@aws-sdk/client-dynamodb';
import { Controller, Inject, Injectable, Param, Post } from '@nestjs/common';
import { Redis } from 'ioredis';
import {
  IdempotencyContext,
  Idempotent,
  IdempotencyCollector,
  type IdempotencyEncryptionOptions,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '../../src/index.js';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import { partitionKey } from '../../src/stores/dynamodb/dynamodb-item.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { DEFAULT_SCOPE } from '../../src/stores/index.js';
import { startDynalite, type LocalDynamoDb } from '../utils/dynalite.js';
import { answer } from '../utils/problems.js';
import { REDIS } from '../utils/store-subjects.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';

const KiB = 1024;

@Injectable()
class Effects {
  /** How many times each key's step ran. */
  readonly steps = new Map<string, number>();
  /** Keys whose handler fails once, after its step. */
  readonly failOnce = new Set<string>();
}

@Controller('step')
class SizedStepController {
  constructor(
    @Inject(Effects) private readonly effects: Effects,
    @Inject(IdempotencyContext) private readonly context: IdempotencyContext,
  ) {}

  @Post(':size')
  @Idempotent()
  async run(@Param('size') size: string) {
    const key = this.context.key as string;
    const result = await this.context.step('big', () => {
      this.effects.steps.set(key, (this.effects.steps.get(key) ?? 0) + 1);
      return 'y'.repeat(Number(size));
    });
    if (this.effects.failOnce.delete(key)) {
      throw new Error('the handler failed after its step');
    }
    return { length: result.length };
  }

  /**
   * Two strings of half `size` each: over jsonb's limit of a whole value
   * without a string over V8's (Node 26 aborts in `JSON.stringify` of a
   * flat string of 268,435,451 characters or more).
   */
  @Post(':size/halves')
  @Idempotent()
  async halves(@Param('size') size: string) {
    const key = this.context.key as string;
    const result = await this.context.step('big', () => {
      this.effects.steps.set(key, (this.effects.steps.get(key) ?? 0) + 1);
      const half = 'y'.repeat(Number(size) / 2);
      return [half, half];
    });
    return { length: result.join('').length };
  }
}

const ring: IdempotencyEncryptionOptions = {
  keys: { k1: randomBytes(32).toString('base64') },
  current: 'k1',
};

/** The 500 every attempt of a key whose step's result was too large gets. */
function tooLarge(bytes: number) {
  return {
    status: 500,
    contentType: expect.stringMatching(/^application\/problem\+json/),
    retryAfter: null,
    replayed: false,
    body: {
      type: 'urn:idempotency:step-result-too-large',
      title: 'Step result too large to keep',
      status: 500,
      detail: `A step of this request ran, but its result (${bytes} bytes) is too large for the idempotency store to keep. The step does not run again under this idempotency key, so retrying with it cannot succeed.`,
    },
  };
}

/** The first attempt and the retry of `size` under one new key, and its step's runs. */
async function twice(url: string, effects: Effects, size: number, shape = '') {
  const key = randomUUID();
  const post = () =>
    answer(
      fetch(`${url}/step/${size}${shape}`, {
        method: 'POST',
        headers: { 'idempotency-key': key },
      }),
    );
  const first = await post();
  const retry = await post();
  return { key, first, retry, steps: effects.steps.get(key) };
}

describe.each([
  ['plain', undefined],
  ['encrypted', ring],
] as const)('step result sizes on DynamoDB, %s', (_name, encryption) => {
  let dynamo: LocalDynamoDb;
  let client: DynamoDBClient;
  let target: StoreApp;
  let effects: Effects;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    dynamo = await startDynalite();
    client = dynamo.client();
    await DynamoDbIdempotencyStore.createTable(client, { timeToLive: false });
    target = await startStoreApp({
      store: new DynamoDbIdempotencyStore(client),
      controllers: [SizedStepController],
      providers: [Effects],
      idempotency: { encryption, onEvent: (event) => events.push(event) },
    });
    effects = target.app.get(Effects);
  });
  afterAll(async () => {
    await target?.close();
    await dynamo?.close();
  });

  it('keeps a result of 390 KiB: the retry replays, the step ran once', async () => {
    const { first, retry, steps } = await twice(target.url, effects, 390 * KiB);
    expect(first).toMatchObject({ status: 201, body: { length: 390 * KiB } });
    expect(retry).toMatchObject({
      status: 201,
      replayed: true,
      body: { length: 390 * KiB },
    });
    expect(steps).toBe(1);
  });

  it('answers a result of 420 KiB with a 500 that every retry gets, the step run once, the key kept bound', async () => {
    const size = 420 * KiB;
    const { key, first, retry, steps } = await twice(target.url, effects, size);
    // As stored: its JSON (two quotes), sealed in bytes with `encryption`
    // (the format's 35 bytes for key "k1").
    const bytes = size + 2 + (encryption ? 35 : 0);
    expect(first).toEqual(tooLarge(bytes));
    expect(retry).toEqual(tooLarge(bytes));
    expect(steps).toBe(1);
    // Bound to its request: another one under the key is refused.
    const other = await answer(
      fetch(`${target.url}/step/1`, {
        method: 'POST',
        headers: { 'idempotency-key': key },
      }),
    );
    expect(other.status).toBe(422);
    expect(effects.steps.get(key)).toBe(1);
  });

  it('reports the step as run without a result when its key is abandoned', async () => {
    const size = 420 * KiB;
    const { key, first } = await twice(target.url, effects, size);
    expect(first.status).toBe(500);
    // What its item had room for (see saveStepResult): DynamoDB's 400 KB,
    // less the step's name, the request's fingerprint and the record's room.
    const { Item } = await client.send(
      new GetItemCommand({
        TableName: 'idempotency_records',
        Key: { pk: { S: partitionKey(DEFAULT_SCOPE, key) } },
        ConsistentRead: true,
      }),
    );
    const room =
      400 * KiB - 'big'.length - (Item?.fingerprint?.S ?? '').length - 2048;
    // The request never completes: its step, and the key, expire.
    const past = { N: String(Date.now() - 1000) };
    await client.send(
      new UpdateItemCommand({
        TableName: 'idempotency_records',
        Key: { pk: { S: partitionKey(DEFAULT_SCOPE, key) } },
        UpdateExpression:
          'SET steps.big.e = :past, expires_at = :past, bound_until = :past, lease_expires_at = :past',
        ExpressionAttributeValues: { ':past': past },
      }),
    );
    await target.app.get(IdempotencyCollector).collect();
    const bytes = size + 2 + (encryption ? 35 : 0);
    expect(
      events.filter((event) => event.key === key && event.type === 'abandoned'),
    ).toEqual([
      {
        type: 'abandoned',
        scope: DEFAULT_SCOPE,
        key,
        steps: [
          {
            step: 'big',
            result: undefined,
            unreadable: `it ran, and its result (${bytes} bytes) was too large for the store to keep (at most ${room} bytes)`,
          },
        ],
      },
    ]);
  });

  if (encryption) {
    it('seals a step’s result in bytes, and still opens one an earlier version sealed as base64 text', async () => {
      const size = 200 * KiB;
      const post = (url: string, key: string) =>
        answer(
          fetch(`${url}/step/${size}`, {
            method: 'POST',
            headers: { 'idempotency-key': key },
          }),
        );
      const stepOf = async (key: string) => {
        const { Item } = await client.send(
          new GetItemCommand({
            TableName: 'idempotency_records',
            Key: { pk: { S: partitionKey(DEFAULT_SCOPE, key) } },
            ConsistentRead: true,
          }),
        );
        return Item?.steps?.M?.big?.M?.r;
      };
      // An earlier version: the store took JSON values only.
      const textStore = new DynamoDbIdempotencyStore(client);
      Object.defineProperty(textStore, 'binaryStepResults', { value: false });
      const earlier = await startStoreApp({
        store: textStore,
        controllers: [SizedStepController],
        providers: [Effects],
        idempotency: { encryption },
      });
      const old = randomUUID();
      const earlierEffects = earlier.app.get(Effects);
      try {
        earlierEffects.failOnce.add(old);
        expect((await post(earlier.url, old)).status).toBe(500);
      } finally {
        await earlier.close();
      }
      expect((await stepOf(old))?.S).toMatch(/^"idempotency-sealed:/);
      // Its retry, on this version, resumes after the step.
      expect(await post(target.url, old)).toMatchObject({
        status: 201,
        body: { length: size },
      });
      expect(earlierEffects.steps.get(old)).toBe(1);
      expect(effects.steps.get(old)).toBeUndefined();

      // This version: the sealed bytes, 35 more than the JSON for key "k1".
      const key = randomUUID();
      effects.failOnce.add(key);
      expect((await post(target.url, key)).status).toBe(500);
      expect((await stepOf(key))?.B?.byteLength).toBe(size + 2 + 35);
      expect(await post(target.url, key)).toMatchObject({
        status: 201,
        body: { length: size },
      });
      expect(effects.steps.get(key)).toBe(1);
    });
  }
});

/** A store that keeps large values, and what its application needs. */
type Kept = () => Promise<{ store: IdempotencyStore; close(): Promise<void> }>;

const REDIS_DB = 15;

describe.each([
  [
    'redis',
    (async () => {
      const client = new Redis({ ...REDIS, db: REDIS_DB });
      const prefix = `idempotency-step-size-${randomUUID().slice(0, 8)}:`;
      return {
        store: new RedisIdempotencyStore(client, { prefix }),
        async close() {
          const keys = await client.keys(`${prefix}*`);
          if (keys.length > 0) {
            await client.del(...keys);
          }
          await client.quit();
        },
      };
    }) as Kept,
  ],
] as const)('large step results on %s', (_name, keep) => {
  it.each([
    ['plain', undefined],
    ['encrypted', ring],
  ] as const)(
    'keeps a result of 2 MiB, %s: the retry replays, the step ran once',
    async (_mode, encryption) => {
      const kept = await keep();
      const app = await startStoreApp({
        store: kept.store,
        controllers: [SizedStepController],
        providers: [Effects],
        idempotency: { encryption },
      });
      try {
        const size = 2048 * KiB;
        const { first, retry, steps } = await twice(
          app.url,
          app.app.get(Effects),
          size,
        );
        expect(first).toMatchObject({ status: 201, body: { length: size } });
        expect(retry).toMatchObject({
          status: 201,
          replayed: true,
          body: { length: size },
        });
        expect(steps).toBe(1);
      } finally {
        await app.close();
        await kept.close();
      }
    },
  );
});

describe('step result sizes on PostgreSQL', () => {
  let app: TestApp;

  beforeAll(async () => {
    app = await startTestApp({
      controllers: [SizedStepController],
      providers: [Effects],
      // Saving 256 MiB is refused only once PostgreSQL has read it all: on
      // a busy machine that took longer than the default 30 s deadline,
      // whose 503 (the attempt abandoned) is not the answer under test.
      idempotency: { transactionTimeout: '3m' },
    });
  });
  afterAll(() => app?.close());

  it('answers a result over jsonb’s 256 MiB with a 500 that every retry gets, the step run once', async () => {
    const size = 256 * KiB * KiB;
    const effects = app.app.get(Effects);
    const { key, first, retry, steps } = await twice(
      app.url,
      effects,
      size,
      '/halves',
    );
    // ["…","…"]: two brackets, four quotes and a comma.
    const bytes = size + 7;
    expect(first).toEqual(tooLarge(bytes));
    expect(retry).toEqual(tooLarge(bytes));
    expect(steps).toBe(1);
    const rows = await app.db.query<{ result: unknown }>(
      'SELECT result FROM idempotency_steps WHERE key = $1',
      [key],
    );
    expect(rows).toEqual([
      {
        result: {
          '$idempotency:unkept': { bytes, limitBytes: 268_435_455 },
        },
      },
    ]);
  }, 420_000);
});
