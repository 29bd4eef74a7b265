import { AsyncLocalStorage } from 'node:async_hooks';
import type { Pool } from 'pg';

/** The client that the next `connect()` of a routed pool hands out, once. */
interface Route {
  client: object | undefined;
}

const routes = new AsyncLocalStorage<Route>();

/** The pools whose `connect()` follows the routes. */
const routed = new WeakSet<Pool>();

/**
 * @internal Makes `pool.connect()`, called without arguments in the async
 * context of {@link routeTo}, hand out that call's client instead of a
 * connection of its own, once; every other call (none routed, or with a
 * callback, as `pool.query()` makes) is the pool's own.
 *
 * For a data library that keeps its pool out of reach but takes each
 * connection with `pool.connect()` and gives it back with
 * `client.release()` (Kysely's `PostgresDialect`: its whole `PostgresPool`
 * contract): the library's own driver then runs a statement on a client of
 * the module's choosing, such as a handler's lazy client (pool-transaction.ts).
 */
export function routePool(pool: Pool): void {
  if (routed.has(pool)) {
    return;
  }
  routed.add(pool);
  const connect = pool.connect.bind(pool) as (
    ...args: unknown[]
  ) => Promise<unknown>;
  Object.defineProperty(pool, 'connect', {
    configurable: true,
    writable: true,
    value(...args: unknown[]) {
      const route = args.length === 0 ? routes.getStore() : undefined;
      const client = route?.client;
      if (client) {
        // Taken at once: a lazy client that takes its own connection of
        // the pool inside this call gets a real one.
        route.client = undefined;
        return Promise.resolve(client);
      }
      return connect(...args);
    },
  });
}

/**
 * @internal Runs `fn` with the next `connect()` of a routed pool in its
 * async context handing out `client`; `fn` is told, with `taken()`,
 * whether it did (if not, the library took a connection of another pool).
 */
export function routeTo<T>(client: object, fn: (taken: () => boolean) => T): T {
  const route: Route = { client };
  return routes.run(route, () => fn(() => route.client === undefined));
}
