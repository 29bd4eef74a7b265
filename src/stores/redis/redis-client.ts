import { Logger } from '@nestjs/common';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { loadOptionalPeer } from '../../core/optional-peer.js';
import { redactUrl } from '../../core/redact-url.js';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import type { RedisScript } from './redis.scripts.js';
import { messageOf } from '../../core/error-message.js';

const logger = new Logger('Idempotency');

/** A client of the store: a single server (or Sentinel) or a Cluster. */
export type RedisClient = Redis | Cluster;

/** Where a client connects, to be printed: no password. */
function describeConnection(connection: string | RedisOptions): string {
  if (typeof connection !== 'string') {
    const { host = '127.0.0.1', port = 6379, db = 0 } = connection;
    return `${host}:${port}, database ${db}`;
  }
  return redactUrl(connection);
}

/**
 * @internal A client of the store's own, from ioredis options or a URL
 * (loads ioredis only now), with `maxRetriesPerRequest: 1` unless the
 * options say otherwise (see `RedisIdempotencyStore.connect`), connected:
 * its database selected (ioredis goes on in database 0 when the server
 * refuses the one asked for, and reports it only as an `error` event). An
 * outage is logged once, not once per reconnection attempt, and its end
 * said.
 * @throws IdempotencyConfigurationError when ioredis is not installed, or
 *   the server cannot be reached or refuses the database; the client is
 *   closed then.
 */
export async function connectRedis(
  connection: string | RedisOptions,
): Promise<Redis> {
  const ioredis = await loadOptionalPeer('ioredis', () => import('ioredis'));
  if (!ioredis) {
    throw new IdempotencyConfigurationError(
      'The Redis store needs the ioredis package, which is not installed.',
      'Install it: `npm install ioredis`.',
    );
  }
  const { Redis } = ioredis;
  const defaults = { maxRetriesPerRequest: 1 };
  const client =
    typeof connection === 'string'
      ? new Redis(connection, { ...defaults, lazyConnect: true })
      : new Redis({ ...defaults, ...connection, lazyConnect: true });
  let down = false;
  client.on('error', (error: Error) => {
    if (!down) {
      down = true;
      logger.warn(
        `Redis (${describeConnection(connection)}): ${error.message}; reconnecting, and requests get 503 meanwhile`,
      );
    }
  });
  client.on('ready', () => {
    if (down) {
      down = false;
      logger.log(`Redis (${describeConnection(connection)}): connected again`);
    }
  });
  try {
    await client.connect();
    const { db } = client.options;
    if (db) {
      // Refused, it leaves the client in database 0: checked here, where a
      // refusal fails the start instead of reaching another database.
      await client.select(db);
    }
  } catch (error) {
    client.disconnect();
    throw new IdempotencyConfigurationError(
      `The Redis store could not connect to ${describeConnection(connection)}: ${messageOf(error)}.`,
      'Check the URL or options, and that the server is up and has that database.',
    );
  }
  return client;
}

type Argument = string | Buffer | number;

/** Sockets held (corked) by {@link batchWrites} until the loop's next turn. */
const corked = new WeakSet<object>();

/**
 * @internal Holds the writes of a single-server client on its socket until
 * the event loop's next turn (its check phase), so that the commands of the
 * requests in flight leave in one write, as a pipeline; call it before a
 * command. This is how node-redis writes every command. Unlike ioredis's
 * `enableAutoPipelining`, it builds no `Pipeline` per batch and never holds
 * a command while the batch before it waits for its replies. Nothing to do
 * with auto-pipelining on (it batches by itself), for a Cluster (whose
 * sockets are its nodes'), or while the client is not ready (its commands
 * wait in its offline queue). Corking nests: any other cork of the same
 * socket keeps its own.
 */
export function batchWrites(client: RedisClient): void {
  const { stream, status, options } = client as Partial<Redis>;
  if (
    !stream ||
    status !== 'ready' ||
    options?.enableAutoPipelining ||
    corked.has(stream)
  ) {
    return;
  }
  stream.cork();
  corked.add(stream);
  setImmediate(() => {
    corked.delete(stream);
    stream.uncork();
  });
}

/**
 * The script commands of an ioredis client, replying in strings or (the
 * `…Buffer` variants) in Buffers. Not callBuffer('evalsha', …): with
 * enableAutoPipelining, ioredis cannot pipeline a command sent by call().
 * ioredis has Buffer variants of every command, but its types omit these.
 */
interface ScriptCommands {
  evalsha(sha: string, keys: number, ...rest: Argument[]): Promise<unknown>;
  eval(lua: string, keys: number, ...rest: Argument[]): Promise<unknown>;
  evalshaBuffer(
    sha: string,
    keys: number,
    ...rest: Argument[]
  ): Promise<unknown>;
  evalBuffer(lua: string, keys: number, ...rest: Argument[]): Promise<unknown>;
}

function missing(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * @internal Runs a script in one round trip: EVALSHA, or EVAL (which loads
 * it again) when the server has lost it (restarted, failed over, or SCRIPT
 * FLUSH).
 */
export function runScript<T>(
  client: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly Argument[],
): Promise<T> {
  return run<T>(client, script, keys, args, false);
}

/** @internal {@link runScript} with the bulk strings of its reply as Buffers. */
export function runScriptBuffer<T>(
  client: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly Argument[],
): Promise<T> {
  return run<T>(client, script, keys, args, true);
}

async function run<T>(
  client: RedisClient,
  { lua, sha }: RedisScript,
  keys: readonly string[],
  args: readonly Argument[],
  buffers: boolean,
): Promise<T> {
  const commands = client as unknown as ScriptCommands;
  batchWrites(client);
  try {
    return (await (buffers
      ? commands.evalshaBuffer(sha, keys.length, ...keys, ...args)
      : commands.evalsha(sha, keys.length, ...keys, ...args))) as T;
  } catch (error) {
    if (!missing(error)) {
      throw error;
    }
    return (await (buffers
      ? commands.evalBuffer(lua, keys.length, ...keys, ...args)
      : commands.eval(lua, keys.length, ...keys, ...args))) as T;
  }
}
