import { randomUUID } from 'node:crypto';
import {
  Body,
  Controller,
  Injectable,
  Post,
  type INestApplication,
} from '@nestjs/common';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Redis } from 'ioredis';
import { Idempotent } from '../../src/index.js';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { Barrier, turns } from '../utils/barrier.js';
import { startDynalite } from '../utils/dynalite.js';
import { UNAVAILABLE } from '../utils/problems.js';
import { keysOf } from '../utils/redis-server.js';
import { describeWithServer } from '../utils/server.js';
import { startStoreApp } from '../utils/store-app.js';
import { startTestApp } from '../utils/test-app.js';
import { createTestDatabase } from '../utils/test-database.js';
import { REDIS } from '../utils/store-subjects.js';
import { TcpGate } from '../utils/tcp-gate.js';

/*
 * A store whose network goes silent (the TcpGate accepts connections and
 * forwards nothing; those established are cut): the request gets the
 * module's 503 by the attempt's deadline (`transactionTimeout` from its
 * arrival, a round trip's time more at most), whatever the store's client
 * does with its commands (ioredis holds them until it reconnects, the AWS
 * SDK and pg have no request timeout by default). Once the store is back, a
 * completion that landed after all is replayed, one that did not lets the
 * retry run, and a claim that landed after all is released.
 */

/** The route's deadline. */
const TRANSACTION_TIMEOUT_MS = 2_000;
/**
 * When the 503 must have come: far past the deadline (and the round trip
 * more), so that a busy machine cannot fail it; without the bound, no
 * answer comes before the store is back.
 */
const ANSWER_WITHIN_MS = 10_000;
/** The shared Redis's database of these tests. */
const REDIS_DB = 14;

@Injectable()
class Runs {
  count = 0;
  barrier: Barrier | undefined;
}

@Controller()
class DeadlineController {
  constructor(private readonly runs: Runs) {}

  @Post('charges')
  @Idempotent({ transactionTimeout: `${TRANSACTION_TIMEOUT_MS}ms` })
  async charge(@Body() body: { amount: number }) {
    this.runs.count += 1;
    const run = this.runs.count;
    await this.runs.barrier?.wait();
    return { run, amount: body.amount };
  }
}

/** What the tests start their application with. */
const APP = { controllers: [DeadlineController], providers: [Runs] };

/** An application whose store is behind a gate, and how to let both go. */
interface GatedApp {
  readonly app: INestApplication;
  readonly url: string;
  readonly gate: TcpGate;
  /**
   * Whether a completion that reaches the store past the attempt's
   * deadline is written: on DynamoDB (fenced by the owner, whom nobody
   * replaced), not on Redis, where the claim's key expired at the deadline
   * (its lease is never renewed past it); on PostgreSQL (`undefined`), it
   * is when it reaches the server before the release, which the pool sends
   * on another connection. The retry runs the handler only when it was not
   * written.
   */
  readonly lateCompletionLands: boolean | undefined;
  close(): Promise<void>;
}

const redisUrl = `redis://${REDIS.host}:${REDIS.port}/${REDIS_DB}`;

/**
 * An application on a Redis store of `open(url, prefix)` through a gate,
 * its keys removed on close.
 */
async function gatedRedis(
  open: (url: string, prefix: string) => Promise<RedisIdempotencyStore>,
): Promise<GatedApp> {
  const gate = await new TcpGate(redisUrl).start();
  const prefix = `idempotency-deadline-${randomUUID().slice(0, 8)}:`;
  const store = await open(gate.url, prefix);
  const target = await startStoreApp({ store, ...APP });
  return {
    ...target,
    gate,
    lateCompletionLands: false,
    async close() {
      gate.open();
      await target.close();
      (store.client as Redis).disconnect();
      await gate.stop();
      const direct = new Redis(redisUrl);
      const keys = await keysOf(direct, prefix);
      if (keys.length > 0) {
        await direct.del(...keys);
      }
      await direct.quit();
    },
  };
}

const subjects: Array<[string, () => Promise<GatedApp>]> = [
  [
    'Redis, RedisIdempotencyStore.connect()',
    () =>
      gatedRedis((url, prefix) =>
        RedisIdempotencyStore.connect(url, { prefix }),
      ),
  ],
  [
    "Redis, the application's client with ioredis's defaults",
    () =>
      gatedRedis((url, prefix) => {
        const client = new Redis(url);
        client.on('error', () => undefined);
        return Promise.resolve(new RedisIdempotencyStore(client, { prefix }));
      }),
  ],
  [
    "DynamoDB, the SDK's default client",
    async () => {
      const dynamo = await startDynalite();
      const gate = await new TcpGate(dynamo.endpoint).start();
      const client = new DynamoDBClient({
        endpoint: gate.url.replace(/\/$/, ''),
        region: 'local',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      });
      await DynamoDbIdempotencyStore.createTable(client, {
        timeToLive: false,
      });
      const target = await startStoreApp({
        store: new DynamoDbIdempotencyStore(client),
        ...APP,
      });
      return {
        ...target,
        gate,
        lateCompletionLands: true,
        async close() {
          gate.open();
          await target.close();
          client.destroy();
          await gate.stop();
          await dynamo.close();
        },
      };
    },
  ],
  [
    'PostgreSQL (TypeORM, no presence session)',
    async () => {
      const db = await createTestDatabase();
      const gate = await new TcpGate(db.url).start();
      try {
        const target = await startTestApp({
          database: db,
          typeorm: { url: gate.url },
          idempotency: { presence: false },
          ...APP,
        });
        return {
          ...target,
          gate,
          lateCompletionLands: undefined,
          async close() {
            gate.open();
            await target.close();
            await gate.stop();
            await db.drop();
          },
        };
      } catch (error) {
        await gate.stop();
        await db.drop();
        throw error;
      }
    },
  ],
];

/** What a request was answered, and how long after `since`. */
interface Answer {
  readonly status: number;
  readonly contentType: string | null;
  readonly retryAfter: string | null;
  readonly replayed: string | null;
  readonly body: unknown;
  readonly afterMs: number;
}

async function answerOf(response: Response, since: number): Promise<Answer> {
  const text = await response.text();
  return {
    status: response.status,
    contentType: response.headers.get('content-type'),
    retryAfter: response.headers.get('retry-after'),
    replayed: response.headers.get('idempotent-replayed'),
    body: text ? (JSON.parse(text) as unknown) : undefined,
    afterMs: Date.now() - since,
  };
}

/** The module's 503, answered within {@link ANSWER_WITHIN_MS}. */
const unavailableInTime = {
  status: 503,
  contentType: expect.stringMatching(/^application\/problem\+json/),
  retryAfter: '1',
  replayed: null,
  body: UNAVAILABLE,
  afterMs: expect.any(Number) as unknown,
};

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

describeRedis('a store whose network goes silent', () => {
  describe.each(subjects)('%s', (_name, start) => {
    let target: GatedApp;
    let runs: Runs;

    beforeAll(async () => {
      target = await start();
      runs = target.app.get(Runs);
    });

    afterAll(() => target?.close());

    beforeEach(() => {
      runs.count = 0;
      runs.barrier = undefined;
      target.gate.open();
    });

    const post = (key: string) =>
      fetch(`${target.url}/charges`, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'Idempotency-Key': key,
        },
        body: JSON.stringify({ amount: 42 }),
      });

    /**
     * An answer to `request`, or `undefined` when none came within
     * {@link ANSWER_WITHIN_MS} (the request is still under way then).
     */
    async function answerWithin(
      request: Promise<Response>,
      since: number,
    ): Promise<Answer | undefined> {
      let timer: NodeJS.Timeout | undefined;
      try {
        return await Promise.race([
          request.then((response) => answerOf(response, since)),
          new Promise<undefined>((resolve) => {
            timer = setTimeout(() => resolve(undefined), ANSWER_WITHIN_MS);
          }),
        ]);
      } finally {
        clearTimeout(timer);
      }
    }

    /**
     * The answer to `key` once it is no longer in progress, honouring each
     * 409's Retry-After (the server's delay, not the test's).
     */
    async function settled(key: string): Promise<Answer> {
      for (;;) {
        const since = Date.now();
        const answer = await answerOf(await post(key), since);
        if (answer.status !== 409) {
          return answer;
        }
        await new Promise((resolve) =>
          setTimeout(resolve, Number(answer.retryAfter) * 1000),
        );
      }
    }

    it('answers 503 by the deadline when the completion goes unanswered; once the store is back, the retry replays the completion if it landed, else runs', async () => {
      const key = randomUUID();
      const barrier = new Barrier();
      runs.barrier = barrier;
      const first = post(key);
      await barrier.reached(1);
      target.gate.close();
      target.gate.cut();
      // The clients see their connections end (a pool drops its idle
      // ones): the completion goes on a new connection, held at the gate.
      await turns();
      const since = Date.now();
      barrier.open();
      const answer = await answerWithin(first, since);
      target.gate.open();
      // A request left under way is answered before the next test.
      await first.catch(() => undefined);
      expect(answer).toEqual(unavailableInTime);

      // The completion was sent, and reaches the store once it is back:
      // written, the retry gets it and the handler never runs again;
      // refused, the key is free and the retry runs it.
      const retried = await settled(key);
      const lateCompletionLands =
        target.lateCompletionLands ?? runs.count === 1;
      expect(retried).toEqual({
        status: 201,
        contentType: expect.stringMatching(/^application\/json/),
        retryAfter: null,
        replayed: lateCompletionLands ? 'true' : null,
        body: { run: lateCompletionLands ? 1 : 2, amount: 42 },
        afterMs: expect.any(Number),
      });
      expect(runs.count).toBe(lateCompletionLands ? 1 : 2);
      // Finished either way: replayed from now on.
      expect(await settled(key)).toMatchObject({
        status: 201,
        replayed: 'true',
        body: { run: runs.count, amount: 42 },
      });
    }, 60_000);

    it('answers 503 by the deadline when the claim goes unanswered, and releases the claim that landed once the store is back', async () => {
      const key = randomUUID();
      target.gate.close();
      target.gate.cut();
      // The clients see their connections end (a pool drops its idle
      // ones): the claim goes on a new connection, held at the gate.
      await turns();
      const since = Date.now();
      const first = post(key);
      const answer = await answerWithin(first, since);
      target.gate.open();
      await first.catch(() => undefined);
      expect(answer).toEqual(unavailableInTime);
      expect(runs.count).toBe(0);

      // The claim lands once the store is back; released, the key is free
      // for the retry, which runs the handler once.
      expect(await settled(key)).toEqual({
        status: 201,
        contentType: expect.stringMatching(/^application\/json/),
        retryAfter: null,
        replayed: null,
        body: { run: 1, amount: 42 },
        afterMs: expect.any(Number),
      });
      expect(runs.count).toBe(1);
    }, 60_000);
  });
});
