import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../setup/free-port.js';
import { serverIdentity, type ServerIdentity } from './redis-info.js';
import { describeIf } from './server.js';

/** The binaries of a server that speaks the Redis protocol. */
export interface ServerBinaries {
  /** What the server calls itself: `server_name` in its INFO. */
  readonly name: 'redis' | 'valkey';
  /** The server: a name on the PATH, or a path. */
  readonly server: string;
  /** Its command-line client, which creates a cluster. */
  readonly cli: string;
}

/** Redis's binaries, on the PATH. */
export const REDIS_BINARIES: ServerBinaries = {
  name: 'redis',
  server: 'redis-server',
  cli: 'redis-cli',
};

const valkeyServer = process.env.VALKEY_SERVER;

/**
 * Valkey's binaries: the valkey-server that VALKEY_SERVER names (a path) and
 * the valkey-cli beside it, else both on the PATH.
 */
export const VALKEY_BINARIES: ServerBinaries = {
  name: 'valkey',
  server: valkeyServer || 'valkey-server',
  cli: valkeyServer ? join(dirname(valkeyServer), 'valkey-cli') : 'valkey-cli',
};

/** Whether the server and CLI `binaries` run. */
function installed({ server, cli }: ServerBinaries): boolean {
  return [server, cli].every(
    (binary) => spawnSync(binary, ['--version']).status === 0,
  );
}

/** Whether the `redis-server` and `redis-cli` binaries are on the PATH. */
export function redisInstalled(): boolean {
  return installed(REDIS_BINARIES);
}

/**
 * Whether `valkey-server` and `valkey-cli` run (VALKEY_SERVER, else the
 * PATH).
 */
export function valkeyInstalled(): boolean {
  return installed(VALKEY_BINARIES);
}

/**
 * `describe` when `redis-server` is on the PATH; otherwise skipped visibly
 * (a failure under REQUIRE_BROKERS=1).
 */
export function describeWithRedisServer() {
  return describeIf(
    redisInstalled(),
    'restarted Redis',
    'redis-server is not on the PATH',
  );
}

/**
 * `describe` when `valkey-server` runs (see {@link VALKEY_BINARIES});
 * otherwise skipped visibly (a failure under REQUIRE_BROKERS=1).
 */
export function describeWithValkeyServer() {
  return describeIf(
    valkeyInstalled(),
    'Valkey',
    valkeyServer
      ? `VALKEY_SERVER=${valkeyServer} is not a valkey-server with valkey-cli beside it`
      : 'valkey-server is not on the PATH (Debian bookworm-backports package valkey-server)',
  );
}

/**
 * Every key of `prefix` on `client` (one node), in SCAN's order: COUNT 1000,
 * since the shared Redis may hold many keys of other runs.
 */
export async function keysOf(client: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, found] = await client.scan(
      cursor,
      'MATCH',
      `${prefix}*`,
      'COUNT',
      1000,
    );
    cursor = next;
    keys.push(...found);
  } while (cursor !== '0');
  return keys;
}

/** What the server behind `client` says it is (see {@link serverIdentity}). */
export async function serverOf(client: Redis): Promise<ServerIdentity> {
  return serverIdentity(await client.info('server'));
}

/**
 * A redis-server (or another server of {@link ServerBinaries}, such as
 * valkey-server) of the test's own, on a free port and with its files in a
 * temporary directory, which the test may kill and start again on the same
 * port (the shared Redis is never restarted).
 */
export class RedisServer {
  private process: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly config: readonly string[],
    readonly binaries: ServerBinaries,
  ) {}

  /**
   * A server, not started yet.
   * @param config arguments of its configuration, such as `--appendonly yes`.
   * @param options its port (a free one if not given) and its binaries
   * (Redis's if not given).
   */
  static async create(
    config: readonly string[],
    {
      port,
      binaries = REDIS_BINARIES,
    }: { port?: number; binaries?: ServerBinaries } = {},
  ): Promise<RedisServer> {
    return new RedisServer(
      port ?? (await freePort()),
      await mkdtemp(join(tmpdir(), `idempotency-${binaries.name}-`)),
      config,
      binaries,
    );
  }

  /**
   * Starts it, on its port; resolves once it accepts connections and its
   * INFO names the server of its binaries (no Redis taken for Valkey).
   */
  async start(): Promise<this> {
    const { server } = this.binaries;
    const child = spawn(
      server,
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--dir',
        this.dir,
        // No RDB snapshot, whatever the configuration: only the AOF (if the
        // test turns it on) persists anything.
        '--save',
        '',
        ...this.config,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.process = child;
    let output = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        output += chunk;
        if (output.includes('Ready to accept connections')) {
          resolve();
        }
      });
      child.once('error', reject);
      child.once('exit', (code) =>
        reject(new Error(`${server} exited (${code}):\n${output}`)),
      );
    });
    // One connection, no retry: a server killed meanwhile fails the start.
    const client = new Redis({
      host: '127.0.0.1',
      port: this.port,
      retryStrategy: () => null,
    });
    try {
      const { name } = await serverOf(client);
      if (name !== this.binaries.name) {
        throw new Error(`${server} is ${name}, not ${this.binaries.name}`);
      }
    } catch (error) {
      // Not the server the test asked for: nothing of it is kept.
      await this.stop();
      throw error;
    } finally {
      client.disconnect();
    }
    return this;
  }

  /** Kills it (SIGKILL: nothing is saved on the way out). */
  async kill(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    }
  }

  /** Kills it and removes its files. */
  async stop(): Promise<void> {
    await this.kill();
    await rm(this.dir, { recursive: true, force: true });
  }
}
