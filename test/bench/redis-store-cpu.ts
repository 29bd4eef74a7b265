/**
 * The Redis store's own CPU a request, in the application's process: claims
 * and completes new keys (no steps, nobody waiting), one at a time and 16 at
 * a time, against a Redis server (`BENCH_REDIS_URL`, the local one by
 * default), and prints the process's CPU time (user + system) per claim and
 * completion, the median of `BENCH_ROUNDS` rounds of `BENCH_KEYS` keys each.
 * The keys go under a prefix of the run's own, deleted afterwards.
 *
 *     tsc -p test/bench/tsconfig.json
 *     node dist-bench/test/bench/redis-store-cpu.js
 *
 * (`node --cpu-prof` for a profile of the same work). The figure includes
 * ioredis and the socket's system calls: compare builds of the store in
 * rounds that alternate, on a quiet machine.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import type {
  ClaimRequest,
  Completion,
} from '../../src/interfaces/idempotency-store.interface.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { cleanRedis } from './redis-server.js';

const url = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const keys = Number(process.env.BENCH_KEYS ?? 20_000);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const concurrencies = [1, 16];

const body = Buffer.from(
  JSON.stringify({ id: randomUUID(), amount: 1250, currency: 'EUR' }),
);
const completion: Completion = {
  status: 'completed',
  response: {
    status: 201,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body,
  },
  ttlMs: 60_000,
};

/** Claims and completes `count` new keys, `concurrency` at a time. */
async function run(
  store: RedisIdempotencyStore,
  name: string,
  count: number,
  concurrency: number,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const request: ClaimRequest = {
        scope: 'POST /payments',
        key: `${name}-${next++}`,
        owner: randomUUID(),
        fingerprint: 'f'.repeat(64),
        method: 'POST',
        path: '/payments',
        leaseMs: 15_000,
        ttlMs: 60_000,
        wait: false,
      };
      const outcome = await store.claim(request);
      if (outcome.state !== 'claimed') {
        throw new Error(`A new key was not claimed: ${outcome.state}`);
      }
      const write = await store.complete(outcome.lease ?? request, completion);
      if (!write.fenced) {
        throw new Error('A completion was not fenced');
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/** µs of this process's CPU a claim and completion, over one run. */
async function measure(
  store: RedisIdempotencyStore,
  name: string,
  concurrency: number,
): Promise<number> {
  const before = process.cpuUsage();
  await run(store, name, keys, concurrency);
  const { user, system } = process.cpuUsage(before);
  return (user + system) / keys;
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};

async function main(): Promise<void> {
  const client = new Redis(url);
  const runId = randomUUID();
  const store = new RedisIdempotencyStore(client, {
    prefix: `idempotency-bench-${runId}:`,
  });
  try {
    await run(store, 'warmup', keys / 4, 16);
    const figures = new Map<number, number[]>(
      concurrencies.map((concurrency) => [concurrency, []]),
    );
    for (let round = 0; round < rounds; round++) {
      for (const concurrency of concurrencies) {
        figures
          .get(concurrency)!
          .push(await measure(store, `${round}-${concurrency}`, concurrency));
      }
    }
    for (const [concurrency, values] of figures) {
      console.log(
        `concurrency ${concurrency}: ${median(values).toFixed(1)} µs of CPU a claim and completion (rounds: ${values.map((value) => value.toFixed(1)).join(', ')})`,
      );
    }
  } finally {
    await cleanRedis(client, runId);
    await store.close();
    client.disconnect();
  }
}

await main();
