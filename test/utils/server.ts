import { createConnection } from 'node:net';

/** Whether something accepts TCP connections at host:port (within 1 s). */
export function reachable(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * `describe` when what a suite needs is `available`; otherwise the suite is
 * skipped with a visible reason (`absence`), unless REQUIRE_BROKERS=1 (as in
 * CI), which makes the absence a failure.
 */
export function describeIf(available: boolean, name: string, absence: string) {
  if (available) {
    return describe;
  }
  if (process.env.REQUIRE_BROKERS === '1') {
    throw new Error(`${name} is required (REQUIRE_BROKERS=1) but ${absence}`);
  }
  console.warn(`Skipping the ${name} tests: ${absence}`);
  return describe.skip;
}

/**
 * `describe` when the server (a broker, a database other than the suite's
 * PostgreSQL) is reachable; otherwise the suite is skipped with a visible
 * reason, unless REQUIRE_BROKERS=1 (as in CI), which makes an unreachable
 * server a failure.
 */
export async function describeWithServer(
  name: string,
  host: string,
  port: number,
) {
  return describeIf(
    await reachable(host, port),
    name,
    `nothing listens on ${host}:${port}`,
  );
}
