import { randomUUID } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import { DEFAULT_SCOPE } from '../../src/stores/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { RedisKeys } from '../../src/stores/redis/redis-keys.js';
import { decodeRecord } from '../../src/stores/redis/redis-record.js';
import {
  BIND,
  CLAIM,
  COMPLETE,
  READ_STEP,
  RELEASE,
  RENEW,
  SAVE_STEP,
} from '../../src/stores/redis/redis.scripts.js';
import {
  RedisCommandFaults,
  type RedisCommand,
} from '../utils/redis-command-faults.js';
import { keysOf } from '../utils/redis-server.js';
import { describeWithServer } from '../utils/server.js';
import { REDIS } from '../utils/store-subjects.js';
import type { Platform } from '../utils/test-app.js';
import { LIMIT } from './charging.js';
import { AMOUNT } from './replies.js';
import {
  describeStoreMatrix,
  failingFastCells,
  resendingCells,
  type StorePoint,
  type StoreTarget,
} from './store-matrix.js';
import { startStorePayments } from './store-matrix.module.js';

/** The store's scripts (loaded before the cells). */
const SCRIPTS = [BIND, CLAIM, COMPLETE, READ_STEP, RELEASE, RENEW, SAVE_STEP];

const text = (arg: unknown) =>
  Buffer.isBuffer(arg) ? arg.toString('latin1') : String(arg);

/** The store's command of `point` for the record at `record`. */
function commandOf(
  point: StorePoint,
  record: string,
): (command: RedisCommand) => boolean {
  const script =
    (sha: string, check: (args: readonly unknown[]) => boolean = () => true) =>
    ({ name, args }: RedisCommand) =>
      name === 'evalsha' &&
      text(args[0]) === sha &&
      text(args[2]) === record &&
      check(args);
  switch (point) {
    case 'claim': {
      // The plain SET NX of a free key, or the script of a held one.
      const held = script(CLAIM.sha);
      return (command) =>
        held(command) ||
        (command.name === 'set' &&
          text(command.args[0]) === record &&
          command.args.map(text).includes('NX'));
    }
    case 'step read':
      return script(READ_STEP.sha);
    case 'step save':
      return script(SAVE_STEP.sha);
    // ARGV[2], the finished record, begins with its status's letter.
    case 'completion':
      return script(COMPLETE.sha, (args) => text(args[6]).startsWith('c '));
    case 'stored error':
      return script(COMPLETE.sha, (args) => text(args[6]).startsWith('f '));
    case 'release':
      return script(RELEASE.sha);
    case 'renewal':
      return script(RENEW.sha);
  }
}

/**
 * The application on a Redis store whose client has `clientOptions`, on
 * the shared Redis under a prefix of its own (deleted on close).
 */
async function startRedisTarget(
  platform: Platform,
  gatewayUrl: string,
  leaseMs: number,
  clientOptions: RedisOptions,
): Promise<StoreTarget<RedisCommand>> {
  const prefix = `idempotency-fault-matrix-${randomUUID().slice(0, 8)}:`;
  const keys = new RedisKeys(prefix);
  const recordOf = (key: string) =>
    keys.record(RedisKeys.id(DEFAULT_SCOPE, key));
  const stepsOf = (key: string) => keys.steps(RedisKeys.id(DEFAULT_SCOPE, key));
  const admin = new Redis(REDIS);
  const client = new Redis({ ...REDIS, ...clientOptions });
  // Every lost connection is reported; the answers tell the rest.
  client.on('error', () => undefined);
  const faults = RedisCommandFaults.install(
    client,
    REDIS,
    `${prefix}fault-marker:`,
  );
  await faults.ready();
  // Redis has every script: a command the server runs is the command itself
  // (not a NOSCRIPT answered, then an EVAL).
  for (const { lua } of SCRIPTS) {
    await admin.script('LOAD', lua);
  }
  const app = await startStorePayments(
    platform,
    new RedisIdempotencyStore(client, { prefix }),
    gatewayUrl,
    leaseMs,
  );
  // The store finds out at its first completion of a key without steps
  // whether Redis has SET IFEQ (Redis 7 does not): before the cells.
  const warmUp = randomUUID();
  for (const [path, amount] of [
    ['/payments/limited', LIMIT],
    ['/payments', AMOUNT],
  ] as const) {
    const response = await fetch(`${app.url}${path}`, {
      method: 'POST',
      headers: {
        'Idempotency-Key': `${warmUp}${path}`,
        'Content-Type': 'application/json',
      },
      body: JSON.stringify({ reference: warmUp, amount }),
    });
    expect(response.status).toBe(201);
  }
  const now = async () => {
    const [seconds, micros] = await admin.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  };
  return {
    app: app.app,
    url: app.url,
    faults,
    callOf: (point, key) => commandOf(point, recordOf(key)),
    ready: () => faults.ready(),
    async record(key) {
      const value = await admin.getBuffer(recordOf(key));
      if (!value) {
        return undefined;
      }
      const record = decodeRecord(value);
      if (record.state === 'finished') {
        return {
          state: record.record.status,
          responseStatus: record.record.response.status,
        };
      }
      const at = await now();
      // A bound claim holds its lease's end in its value (Redis's clock);
      // another one is its key's PX.
      const leaseEnds = record.bound
        ? Number(value.toString('latin1', 3, value.indexOf(0x20, 3)))
        : at + (await admin.pttl(recordOf(key)));
      return { state: 'in_progress', leaseEnds, live: leaseEnds > at };
    },
    async steps(key) {
      return (await admin.hkeys(stepsOf(key)))
        .filter((field) => field.startsWith('s:'))
        .map((field) => field.slice(2));
    },
    async snapshot(key) {
      return {
        record: (await admin.getBuffer(recordOf(key)))?.toString('latin1'),
        steps: await admin.hgetall(stepsOf(key)),
      };
    },
    async close() {
      await app.close();
      await faults.restore();
      client.disconnect();
      const all = await keysOf(admin, prefix);
      if (all.length > 0) {
        await admin.del(...all);
      }
      admin.disconnect();
    },
  };
}

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

describeRedis('Redis', () => {
  /*
   * ioredis's defaults (as `new Redis(url)`): a command written before the
   * connection was lost waits in the offline queue and goes once the
   * client is back; one whose reply was lost is sent again, and runs twice:
   * a stored error is stored either way (the second run of the script is
   * refused, and the client gets its 402 all the same), but its own
   * completion, run again, is no longer its claim: 503 (the store cannot
   * tell it from a takeover), then the retry replays.
   */
  describeStoreMatrix({
    name: "Redis 7, ioredis's defaults",
    start: (platform, gatewayUrl, leaseMs) =>
      startRedisTarget(platform, gatewayUrl, leaseMs, {}),
    cells: resendingCells({ resentCompletion: ['503', '201 replayed'] }),
  });

  /*
   * A client that fails fast (`maxRetriesPerRequest: 0`, no offline
   * queue): a command sent on the lost connection fails without running,
   * one whose reply was lost fails although it ran, and so does every
   * command until the client is back (the release that follows a failure
   * included: it is tried again until it lands, once the client is back).
   */
  describeStoreMatrix({
    name: 'Redis 7, a client failing fast',
    start: (platform, gatewayUrl, leaseMs) =>
      startRedisTarget(platform, gatewayUrl, leaseMs, {
        maxRetriesPerRequest: 0,
        enableOfflineQueue: false,
      }),
    cells: failingFastCells({ releasedLate: true }),
  });
});
