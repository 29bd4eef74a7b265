import type { Pool, PoolClient } from 'pg';
import type { DataSource } from 'typeorm';

/** Statements an application sent through its DataSource's pool. */
export interface StatementLog {
  /** Their text, in the order they were sent, since the log started. */
  readonly statements: readonly string[];
  /** Stops logging. */
  stop(): void;
}

/** The pg pool behind a TypeORM PostgreSQL DataSource. */
export function poolOf(dataSource: DataSource): Pool {
  const pool = (dataSource.driver as unknown as { master?: Pool }).master;
  if (!pool) {
    throw new Error('The DataSource has no pg pool: is it PostgreSQL?');
  }
  return pool;
}

/** Connections of the pool lent out now (neither idle nor free). */
export function busyConnections(dataSource: DataSource): number {
  const pool = poolOf(dataSource);
  return pool.totalCount - pool.idleCount;
}

/**
 * Logs every statement sent on a connection of the DataSource's pool: each
 * connection's `query` is wrapped when the pool lends it (the pool's
 * `acquire` event), whether the statement comes from TypeORM or from the
 * pool's own `query()`. The application talks to the real server; the log
 * only watches.
 */
export function logStatements(dataSource: DataSource): StatementLog {
  const pool = poolOf(dataSource);
  const statements: string[] = [];
  const logged = new WeakSet<PoolClient>();
  let active = true;
  const watch = (client: PoolClient) => {
    if (logged.has(client)) {
      return;
    }
    logged.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      if (active) {
        const [text] = args;
        statements.push(
          typeof text === 'string'
            ? text
            : String((text as { text?: unknown })?.text ?? text),
        );
      }
      return query(...args);
    };
  };
  pool.on('acquire', watch);
  return {
    statements,
    stop() {
      active = false;
      pool.off('acquire', watch);
    },
  };
}
