import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeIf } from './server.js';

/** Whether the `redis-server` and `redis-cli` binaries are on the PATH. */
export function redisInstalled(): boolean {
  return ['redis-server', 'redis-cli'].every(
    (binary) => spawnSync(binary, ['--version']).status === 0,
  );
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

/** A loopback port that nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve()),
  );
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A redis-server of the test's own, on a free port and with its files in a
 * temporary directory, which the test may kill and start again on the same
 * port (the shared Redis is never restarted).
 */
export class RedisServer {
  private process: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly config: readonly string[],
  ) {}

  /**
   * A server, not started yet.
   * @param config arguments of its configuration, such as `--appendonly yes`.
   * @param port its port; a free one if not given.
   */
  static async create(
    config: readonly string[],
    port?: number,
  ): Promise<RedisServer> {
    return new RedisServer(
      port ?? (await freePort()),
      await mkdtemp(join(tmpdir(), 'idempotency-redis-')),
      config,
    );
  }

  /** Starts it, on its port; resolves once it accepts connections. */
  async start(): Promise<this> {
    const child = spawn(
      'redis-server',
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
      child.once('exit', (code) =>
        reject(new Error(`redis-server exited (${code}):\n${output}`)),
      );
    });
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
