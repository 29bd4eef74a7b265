import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from '../setup/free-port.js';
import { until } from './barrier.js';
import {
  REDIS_BINARIES,
  RedisServer,
  type ServerBinaries,
} from './redis-server.js';

const run = promisify(execFile);

/**
 * `count` loopback ports, each free together with its cluster bus port
 * (port + 10000), which a cluster node opens too.
 */
async function clusterPorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  const taken: number[] = [];
  while (ports.length < count) {
    const port = await freePort({ pairedAbove: 10_000 });
    if (!taken.includes(port) && !taken.includes(port + 10_000)) {
      ports.push(port);
      taken.push(port, port + 10_000);
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
 * Starts `masters` redis-servers (or the servers of other `binaries`, such
 * as Valkey's) in cluster mode on free ports, joins them into one cluster
 * with `redis-cli --cluster create` (the slots split evenly), and resolves
 * once every node reports the cluster ok.
 */
export async function startRedisCluster(
  masters = 3,
  binaries: ServerBinaries = REDIS_BINARIES,
): Promise<RedisCluster> {
  const servers = await Promise.all(
    (await clusterPorts(masters)).map((port) =>
      RedisServer.create(
        [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--appendonly',
          'no',
        ],
        { port, binaries },
      ),
    ),
  );
  const stop = async () => {
    await Promise.all(servers.map((server) => server.stop()));
  };
  try {
    await Promise.all(servers.map((server) => server.start()));
    await run(
      binaries.cli,
      [
        '--cluster',
        'create',
        ...servers.map((server) => `127.0.0.1:${server.port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      { timeout: 30_000 },
    );
    // The nodes agree on the slots through their bus: a state only they
    // can report.
    for (const { port } of servers) {
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
    nodes: servers.map(({ port }) => ({ host: '127.0.0.1', port })),
    stop,
  };
}
