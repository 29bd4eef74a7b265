import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';

/**
 * The MariaDB (or MySQL) server on which the migrations must refuse to run:
 * MARIADB_URL, by default root without a password on 127.0.0.1:3306.
 */
export const MARIADB_URL = new URL(
  process.env.MARIADB_URL ?? 'mysql://root@127.0.0.1:3306/test',
);

/** A database of its own for one test on the MariaDB server. */
export interface MariaDbDatabase {
  /** Connection URL of the new database. */
  readonly url: string;
  /** Runs one SQL statement on the new database. */
  query<T>(sql: string, params?: unknown[]): Promise<T[]>;
  /** Names of the tables in the new database, sorted. */
  tables(): Promise<string[]>;
  /** Drops the database and closes the helper connection. */
  drop(): Promise<void>;
}

/** Creates an empty database on the MariaDB server. */
export async function createMariaDbDatabase(): Promise<MariaDbDatabase> {
  const name = `idem_${randomUUID().replaceAll('-', '').slice(0, 20)}`;
  const connection = await mysql.createConnection({ uri: MARIADB_URL.href });
  try {
    await connection.query(`CREATE DATABASE \`${name}\``);
    await connection.changeUser({ database: name });
  } catch (error) {
    await connection.end();
    throw error;
  }
  const url = new URL(MARIADB_URL);
  url.pathname = `/${name}`;
  const query = async <T>(sql: string, params?: unknown[]) => {
    const [rows] = await connection.query(sql, params);
    return rows as T[];
  };
  return {
    url: url.href,
    query,
    async tables() {
      const rows = await query<{ name: string }>(
        `SELECT table_name AS name FROM information_schema.tables
         WHERE table_schema = DATABASE() ORDER BY table_name`,
      );
      return rows.map((row) => row.name);
    },
    async drop() {
      try {
        await connection.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await connection.end();
      }
    },
  };
}
