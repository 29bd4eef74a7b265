import type { Pool } from 'pg';
import type { Redis } from 'ioredis';
import { loadRequiredPeer } from '../core/optional-peer.js';
import { CliUsageError } from './cli-usage-error.js';
import { redactUrl } from '../core/redact-url.js';
import type { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { messageOf } from '../core/error-message.js';
import type { RedisClient } from '../stores/redis/redis-client.js';
import { beginStatement, inTransaction } from '../pg/pg-pool-connection.js';
import { PoolDataAccess } from '../pg/pool-data-access.js';
import { PostgresIdempotencyStore } from '../stores/postgres/postgres.store.js';

/** A store the command line opened, and how to close it. */
export interface CliStore {
  readonly store: IdempotencyStore;
  close(): Promise<void>;
}

/** The URL schemes the command line opens a store for. */
const POSTGRES = /^postgres(ql)?:\/\//i;
const REDIS = /^rediss?:\/\//i;

/**
 * @internal Opens the store of `url`: PostgreSQL on a `pg.Pool` of its own
 * through the pg adapter's machinery (TypeORM is not needed), with no
 * presence session, its schema checked first; or Redis on an ioredis
 * client, with `prefix` when given (a Cluster client when the URL names a
 * node of a Redis Cluster).
 * @throws CliUsageError naming the URLs it takes, for any other URL, or
 * for a `prefix` with a PostgreSQL URL.
 */
export async function openCliStore(
  url: string,
  prefix: string | undefined,
): Promise<CliStore> {
  if (POSTGRES.test(url)) {
    if (prefix !== undefined) {
      // Refused, never ignored: the operator meant a Redis store.
      throw new CliUsageError(
        `--prefix is the Redis store's key prefix: ${redactUrl(url)} is a PostgreSQL URL.`,
      );
    }
    const pg = await loadRequiredPeer(
      'pg',
      () => import('pg'),
      'The command line reaches PostgreSQL through pg, which is not installed.',
    );
    const pool: Pool = new pg.default.Pool({ connectionString: url, max: 2 });
    // An idle connection's error must not end the process unexplained.
    pool.on('error', () => undefined);
    const access = new PoolDataAccess(
      () => ({
        pool,
        client: pool,
        handleOf: (client) => client,
        newTransaction: (isolationLevel, fn) =>
          inTransaction(pool, beginStatement(isolationLevel), fn),
      }),
      {
        where: `the database of ${redactUrl(url)}`,
        how: 'Apply the SQL files that `npx nestjs-idempotency sql` prints (or the TypeORM migrations), as the migrations guide shows.',
      },
      { presence: false },
    );
    const store = new PostgresIdempotencyStore(access, { presence: false });
    try {
      await store.onModuleInit();
    } catch (error) {
      await pool.end();
      throw error;
    }
    return { store, close: () => pool.end() };
  }
  if (REDIS.test(url)) {
    // Loaded here: an installation without ioredis never loads the Redis
    // store. A client that fails to connect, or to select its database, is
    // closed: the command ends, saying why.
    const { connectRedis } = await import('../stores/redis/redis-client.js');
    const { RedisIdempotencyStore } =
      await import('../stores/redis/redis.store.js');
    const client = await clusterOf(await connectRedis(url), url);
    let store: InstanceType<typeof RedisIdempotencyStore>;
    try {
      store = new RedisIdempotencyStore(
        client,
        prefix === undefined ? {} : { prefix },
      );
    } catch (error) {
      client.disconnect();
      throw error;
    }
    return {
      store,
      close: async () => {
        await store.close();
        await client.quit();
      },
    };
  }
  throw new CliUsageError(
    `The URL "${redactUrl(url)}" is neither a PostgreSQL URL (postgres://…) nor a Redis one (redis://…).`,
  );
}

/**
 * `client`, or, when the node it reached is one of a Redis Cluster, a
 * Cluster client seeded with that node (the URL's credentials and TLS for
 * every node), connected: a client of the one node would list and forget
 * that node's keys alone, saying nothing of the others, and be refused
 * (`MOVED`) every key of another node's slots. `client` is closed then.
 * @throws IdempotencyConfigurationError when the cluster cannot be reached.
 */
async function clusterOf(client: Redis, url: string): Promise<RedisClient> {
  const info = await client.info('cluster').catch(() => '');
  if (!/^cluster_enabled:1\b/m.test(info)) {
    return client;
  }
  const { host, port, username, password, tls } = client.options;
  client.disconnect();
  const { Cluster } = await import('ioredis');
  const cluster = new Cluster([{ host, port }], {
    lazyConnect: true,
    redisOptions: { username, password, tls, maxRetriesPerRequest: 1 },
  });
  // Its nodes' errors are the command's to report, not the process's.
  cluster.on('error', () => undefined);
  try {
    await cluster.connect();
  } catch (error) {
    cluster.disconnect();
    throw new IdempotencyConfigurationError(
      `The Redis store could not connect to the cluster of ${redactUrl(url)}: ${messageOf(error)}.`,
      'Check the URL, and that the cluster is up.',
    );
  }
  return cluster;
}
