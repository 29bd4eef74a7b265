/**
 * The settings of the application's `pg` pool, from the environment:
 * `DATABASE_POOL_SIZE` connections (10 by default), each closed after
 * `DATABASE_POOL_IDLE_MS` idle (pg's 10 s when unset; 0 keeps it open).
 */
export function poolSettings(): { max: number; idleTimeoutMillis?: number } {
  const idleMs = process.env.DATABASE_POOL_IDLE_MS;
  return {
    max: Number(process.env.DATABASE_POOL_SIZE ?? 10),
    ...(idleMs && { idleTimeoutMillis: Number(idleMs) }),
  };
}
