import type { Pool, PoolClient } from 'pg';

const COUNTED = Symbol('counted');

/** A statement's text as the counter records it: on one line. */
export function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/**
 * Records every statement sent on the connections of a pool, at the driver:
 * those of TypeORM and the module's own (which go through the driver
 * directly) alike.
 */
export class QueryCounter {
  statements: string[] = [];

  /** Counts the statements of every connection the pool hands out. */
  attach(pool: Pool): void {
    pool.on('acquire', (client) => this.watch(client));
  }

  private watch(client: PoolClient): void {
    const counted = client as PoolClient & { [COUNTED]?: true };
    if (counted[COUNTED]) {
      return;
    }
    counted[COUNTED] = true;
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (
      ...args: unknown[]
    ) => {
      const [config] = args;
      const text =
        typeof config === 'string'
          ? config
          : String((config as { text?: unknown } | undefined)?.text);
      this.statements.push(oneLine(text));
      return query(...args);
    };
  }
}
