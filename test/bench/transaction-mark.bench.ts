/**
 * What the module's mark of a handler's transaction costs PostgreSQL: the
 * module begins it with `START TRANSACTION; SET LOCAL
 * idempotency.transaction = '<uuid>'` in one simple query, where a plain
 * `START TRANSACTION` would do, so that its completion can tell the
 * transaction from one an end sent by hand chained to it (`COMMIT AND
 * CHAIN`). Each round runs the same empty transactions (the begin, then
 * `COMMIT`) on one connection, plainly and marked, alternated (the reverse
 * order every other round), and reads the server process's CPU from
 * `/proc` (its PostgreSQL must run on this machine) and the wall time.
 * Also `SELECT set_config(...)`, the same mark as a query, for scale.
 * Figures: medians of the rounds, µs a transaction; the server's CPU is
 * read in clock ticks (10 ms), so a round of 3,000 reads to about 3 µs.
 *
 *   tsc -p test/bench/tsconfig.json && node dist-bench/test/bench/transaction-mark.bench.js
 *
 * Settings (defaults): BENCH_ROUNDS=7 BENCH_TRANSACTIONS=3000; DATABASE_URL
 * (default postgres://postgres@127.0.0.1:5432/test).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { processCpuMs } from './cpu-time.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const TRANSACTIONS = Number(process.env.BENCH_TRANSACTIONS ?? 3000);
const URL =
  process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** How each variant begins its transaction. */
const BEGINS: Record<string, () => string> = {
  plain: () => 'START TRANSACTION',
  'marked (SET LOCAL)': () =>
    `START TRANSACTION; SET LOCAL idempotency.transaction = '${randomUUID()}'`,
  'marked (set_config)': () =>
    `START TRANSACTION; SELECT set_config('idempotency.transaction', '${randomUUID()}', true)`,
};

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[values.length >> 1];

async function main(): Promise<void> {
  const client = new pg.Client({ connectionString: URL });
  await client.connect();
  try {
    const [{ pid }] = (
      await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
    ).rows;
    const round = async (begin: () => string, count: number) => {
      const cpu = processCpuMs(pid);
      const started = process.hrtime.bigint();
      for (let i = 0; i < count; i += 1) {
        await client.query(begin());
        await client.query('COMMIT');
      }
      const wall = Number(process.hrtime.bigint() - started) / 1000;
      const used = processCpuMs(pid);
      if (cpu === undefined || used === undefined) {
        throw new Error(
          `The server process ${pid} is not on this machine: its CPU cannot be read.`,
        );
      }
      return { serverUs: ((used - cpu) * 1000) / count, wallUs: wall / count };
    };
    const names = Object.keys(BEGINS);
    for (const name of names) {
      await round(BEGINS[name], Math.ceil(TRANSACTIONS / 3));
    }
    const figures = new Map(
      names.map((name) => [
        name,
        { server: [] as number[], wall: [] as number[] },
      ]),
    );
    for (let r = 0; r < ROUNDS; r += 1) {
      for (const name of r % 2 === 0 ? names : [...names].reverse()) {
        const { serverUs, wallUs } = await round(BEGINS[name], TRANSACTIONS);
        figures.get(name)!.server.push(serverUs);
        figures.get(name)!.wall.push(wallUs);
      }
    }
    const plain = figures.get('plain')!;
    console.log(
      `${ROUNDS} rounds of ${TRANSACTIONS} transactions (begin, COMMIT) on one connection, medians, µs a transaction:`,
    );
    for (const [name, { server, wall }] of figures) {
      const extra = server.map((value, i) => value - plain.server[i]);
      console.log(
        `${name.padEnd(22)} server CPU ${median(server).toFixed(1).padStart(6)} (${median(extra) >= 0 ? '+' : ''}${median(extra).toFixed(1)} against plain)  wall ${median(wall).toFixed(1).padStart(6)}`,
      );
    }
  } finally {
    await client.end();
  }
}

await main();
