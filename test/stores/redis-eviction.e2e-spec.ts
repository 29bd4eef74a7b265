/**
 * A Redis that evicts keys when its memory is full (any `maxmemory-policy`
 * but `noeviction`) drops the store's records and steps without a word: a
 * duplicate then runs its request again, a step its effect again. The
 * store refuses such a Redis at start, also where `CONFIG` is renamed away
 * (as managed services do: the policy is read from `INFO`), unless told
 * `allowEviction: true`. On servers of their own.
 */
import { Controller, Post } from '@nestjs/common';
import { Redis } from 'ioredis';
import { Idempotent, IdempotencyConfigurationError } from '../../src/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { describeWithRedisServer, RedisServer } from '../utils/redis-server.js';
import { startStoreApp } from '../utils/store-app.js';

@Controller('charges')
class ChargesController {
  @Post()
  @Idempotent()
  charge() {
    return { charged: true };
  }
}

const describeServers = describeWithRedisServer();

describeServers('a Redis that evicts keys', () => {
  let server: RedisServer | undefined;
  let client: Redis | undefined;
  afterEach(async () => {
    client?.disconnect();
    await server?.stop();
    client = undefined;
    server = undefined;
  });

  const start = async (config: string[], allowEviction?: boolean) => {
    server = await (await RedisServer.create(config)).start();
    client = new Redis({ host: '127.0.0.1', port: server.port });
    return startStoreApp({
      store: new RedisIdempotencyStore(client, { allowEviction }),
      controllers: [ChargesController],
    });
  };

  it.each([
    ['allkeys-lru', []],
    ['volatile-ttl', []],
    ['allkeys-lru', ['--rename-command', 'CONFIG', '']],
  ])('is refused at start (maxmemory-policy %s, %j)', async (policy, more) => {
    const outcome = await start(['--maxmemory-policy', policy, ...more]).then(
      // Started after all: closed, so that nothing is left running.
      async (app) => {
        await app.close();
        return 'started';
      },
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(IdempotencyConfigurationError);
    expect((outcome as Error).message).toContain(
      `The Redis of the idempotency store evicts keys when its memory is full (maxmemory-policy ${policy})`,
    );
  });

  it('starts with allowEviction: true, and serves', async () => {
    const app = await start(['--maxmemory-policy', 'allkeys-lru'], true);
    try {
      const answer = await fetch(`${app.url}/charges`, {
        method: 'POST',
        headers: { 'idempotency-key': 'evict-1' },
      });
      expect(answer.status).toBe(201);
    } finally {
      await app.close();
    }
  });

  it('starts on noeviction', async () => {
    const app = await start(['--maxmemory-policy', 'noeviction']);
    await app.close();
  });
});
