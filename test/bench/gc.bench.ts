/**
 * Garbage collection under load: deletes 200,000 expired records while
 * clients keep sending idempotent requests, and prints the GC rate and the
 * request latency before and during the collection.
 *
 *   npm run bench:gc            (embedded PostgreSQL, fsync on)
 *   DATABASE_URL=... npm run bench:gc
 *   GC_ROWS=500000 GC_CLIENTS=16 npm run bench:gc
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { IdempotencyCollector, Idempotent } from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Order } from '../fixtures/order.entity.js';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import { startTestApp } from '../utils/test-app.js';

const ROWS = Number(process.env.GC_ROWS ?? 200_000);
const CLIENTS = Number(process.env.GC_CLIENTS ?? 8);
const BASELINE_MS = 3_000;

@Controller('orders')
class OrdersController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post()
  @Idempotent()
  async create(@Body() body: { reference: string }) {
    return this.orders.save(this.orders.create({ reference: body.reference }));
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [OrdersController],
})
class BenchModule {}

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0
    ? NaN
    : sorted[
        Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))
      ];
}

function summary(latencies: number[]) {
  const sorted = [...latencies].sort((a, b) => a - b);
  return {
    requests: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.at(-1) ?? NaN,
  };
}

async function main(): Promise<void> {
  const server = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({ durable: true });
  if (server) {
    process.env.DATABASE_URL = server.url;
  }
  const target = await startTestApp({
    imports: [BenchModule],
    idempotency: { gc: false },
  });
  try {
    await target.db.query(
      `INSERT INTO ${IDEMPOTENCY_TABLE_NAME} (scope, key, fingerprint, method, path, status,
         response_status, response_headers, response_body, completed_at, expires_at)
       SELECT 'global', 'expired-' || n, repeat('f', 64), 'POST', '/orders', 'completed', 201,
         '{"content-type":"application/json; charset=utf-8"}', convert_to(repeat('x', 200), 'UTF8'),
         now() - interval '2 days', now() - interval '1 day'
       FROM generate_series(1, $1) n`,
      [ROWS],
    );
    await target.db.query(`VACUUM ANALYZE ${IDEMPOTENCY_TABLE_NAME}`);

    let phase: number[] = [];
    let stop = false;
    let sequence = 0;
    const client = async () => {
      while (!stop) {
        const key = `live-${sequence++}`;
        const started = performance.now();
        const response = await fetch(`${target.url}/orders`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': key,
          },
          body: JSON.stringify({ reference: key }),
        });
        await response.arrayBuffer();
        if (response.status !== 201) {
          throw new Error(`request ${key} answered ${response.status}`);
        }
        phase.push(performance.now() - started);
      }
    };
    const clients = Array.from({ length: CLIENTS }, client);

    // Warm-up (JIT, pool, caches), not measured.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    phase = [];
    await new Promise((resolve) => setTimeout(resolve, BASELINE_MS));
    const before = summary(phase);
    phase = [];
    const gcStarted = performance.now();
    const removed = await target.app.get(IdempotencyCollector).collect(1000);
    const gcMs = performance.now() - gcStarted;
    const during = summary(phase);
    stop = true;
    await Promise.all(clients);

    const [{ left }] = await target.db.query<{ left: number }>(
      `SELECT count(*)::int AS left FROM ${IDEMPOTENCY_TABLE_NAME} WHERE expires_at < now()`,
    );
    const ms = (value: number) => value.toFixed(1);
    console.log(
      `GC of ${removed} expired records (batches of 1000), ${CLIENTS} clients sending new keys`,
    );
    console.log(
      `  GC: ${ms(gcMs)} ms, ${Math.round(removed / (gcMs / 1000))} rows/s, ${left} expired left`,
    );
    console.log('  phase          requests   p50 ms   p99 ms   max ms');
    for (const [name, s] of [
      ['before GC', before],
      ['during GC', during],
    ] as const) {
      console.log(
        `  ${name.padEnd(13)}  ${String(s.requests).padStart(8)}  ${ms(s.p50).padStart(7)}  ${ms(s.p99).padStart(7)}  ${ms(s.max).padStart(7)}`,
      );
    }
  } finally {
    await target.close();
    await server?.stop();
  }
}

await main();
