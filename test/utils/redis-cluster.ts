import {
  execFile,
  spawn,
  spawnSync,
  type ChildProcess,
} from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { until } from './barrier.js';

const run = promisify(execFile);

/** Whether `redis-server` and `redis-cli` are on the PATH. */
export function redisBinariesInstalled(): boolean {
  return ['redis-server', 'redis-cli'].every(
    (binary) => spawnSync(binary, ['--version']).status === 0,
  );
}

/** Whether nothing listens on `port` of the loopback interface. */
function free(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * `count` loopback ports, each free together with its cluster bus port
 * (port + 10000), which a cluster node opens too.
 */
async function clusterPorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < count) {
    const port = 20_000 + Math.floor(Math.random() * 25_000);
    if (
      !ports.includes(port) &&
      (await free(port)) &&
      (await free(port + 10_000))
    ) {
      ports.push(port);
    }
  }
  return ports;
}

/** A Redis Cluster of the test's own: masters only, nothing kept on disk. */
export interface RedisCluster {
  /** The masters, as ioredis's `Cluster` takes its start-up nodes. */
  readonly nodes: ReadonlyArray<{ host: string; port: number }>;
  stop(): Promise<void>;
}

/**
 * Starts `masters` redis-server processes in cluster mode on free ports,
 * joins them into one cluster with `redis-cli --cluster create` (the slots
 * split evenly), and resolves once every node reports the cluster ok.
 */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-redis-cluster-'));
  const ports = await clusterPorts(masters);
  const children: ChildProcess[] = [];
  const stop = async () => {
    await Promise.all(
      children
        .filter((child) => child.exitCode === null && child.signalCode === null)
        .map((child) => {
          const exited = once(child, 'exit');
          child.kill('SIGKILL');
          return exited;
        }),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await Promise.all(
      ports.map(async (port) => {
        const child = spawn(
          'redis-server',
          [
            '--port',
            String(port),
            '--bind',
            '127.0.0.1',
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            `nodes-${port}.conf`,
            '--dir',
            dir,
            '--save',
            '',
            '--appendonly',
            'no',
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        children.push(child);
        let output = '';
        await new Promise<void>((resolve, reject) => {
          child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
            output += chunk;
            if (output.includes('Ready to accept connections')) {
              resolve();
            }
          });
          child.once('exit', (code) =>
            reject(new Error(`redis-server exited (${code}):\n${output}`)),
          );
        });
      }),
    );
    await run(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...ports.map((port) => `127.0.0.1:${port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      { timeout: 30_000 },
    );
    // The nodes agree on the slots through their bus: a state only they
    // can report.
    for (const port of ports) {
      const node = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
      try {
        await until(
          async () => (await node.cluster('INFO')).includes('cluster_state:ok'),
          `the cluster node on port ${port} to report the cluster ok`,
        );
      } finally {
        node.disconnect();
      }
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    nodes: ports.map((port) => ({ host: '127.0.0.1', port })),
    stop,
  };
}
