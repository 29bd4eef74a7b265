import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** Lowest port the tests take for the servers they start. */
const LOWEST = 12_000;

/**
 * The first port of the kernel's ephemeral range, which it hands out to
 * every outgoing connection and to every `listen(0)`: the tests' ports stay
 * below it.
 */
function ephemeralStart() {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    return Number.isInteger(low) && low > LOWEST + 1_000 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Whether nothing listens on `port` of the loopback interface now. */
function isFree(port) {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A loopback port that nothing listens on, for a server a test starts (a
 * PostgreSQL, a Redis, a PgBouncer), drawn at random below the kernel's
 * ephemeral range: a port that `listen(0)` reports free is an ephemeral one,
 * which any outgoing connection (of the suite's many) may take before the
 * server binds it; a port below the range only another draw can take.
 * @param {{ pairedAbove?: number }} [options] `pairedAbove`: the port that
 * many above must be free (and below the range) too, as a Redis Cluster
 * node's bus port must
 * @returns {Promise<number>}
 */
export async function freePort({ pairedAbove = 0 } = {}) {
  const highest = ephemeralStart() - 1 - pairedAbove;
  if (highest < LOWEST) {
    throw new Error(
      `No ports between ${LOWEST} and the kernel's ephemeral range (from ${highest + 1 + pairedAbove}) to draw from`,
    );
  }
  for (;;) {
    const port = LOWEST + Math.floor(Math.random() * (highest - LOWEST + 1));
    if (
      (await isFree(port)) &&
      (pairedAbove === 0 || (await isFree(port + pairedAbove)))
    ) {
      return port;
    }
  }
}
