import pg from 'pg';

/**
 * A `pg.Pool` on `url` for a test's application, listening for `'error'`.
 * An idle connection the server ends is an `'error'` of its pool, which
 * without a listener fails the test run unheard: a fault test's terminated
 * backend, or the drop of the test's database (`WITH (FORCE)`), which can
 * come while `pool.end()` has resolved but its connections are not yet gone.
 * The pool drops such a connection and opens another.
 */
export function testPool(url: string, max = 5): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => undefined);
  return pool;
}
