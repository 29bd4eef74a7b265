import type pg from 'pg';

/** A step save that committed, as the soak's trigger logged it. */
export interface LoggedStep {
  readonly key: string;
  /** The fingerprint of the request that saved it. */
  readonly fingerprint: string;
  /**
   * The charge it stored: the sample's `charge` step holds the gateway's
   * answer (`IdempotencyContext.fetch()`), whose body is `{ id, amount }`.
   */
  readonly chargeId: string;
  /** When it was written (epoch ms), before its commit. */
  readonly at: number;
}

/**
 * Logs every step the app saves into a table of the soak's own, in the
 * transaction that saves it: a save that rolls back leaves no line, one
 * that commits leaves one, and the line stays after the key's completion
 * deletes its steps. The checker learns from it which request a key was
 * bound to, and since when.
 */
export async function installStepLog(db: pg.Pool): Promise<void> {
  await db.query(`
    CREATE TABLE soak_step_log (
      key text NOT NULL, step text NOT NULL, fingerprint text, result jsonb,
      at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  await db.query(`
    CREATE FUNCTION soak_log_step() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO soak_step_log (key, step, fingerprint, result)
      VALUES (NEW.key, NEW.step, NEW.fingerprint, NEW.result);
      RETURN NULL;
    END
    $$`);
  await db.query(`
    CREATE TRIGGER soak_log_step AFTER INSERT OR UPDATE ON idempotency_steps
    FOR EACH ROW EXECUTE FUNCTION soak_log_step()`);
}

/** Every committed step save, oldest first. */
export async function readStepLog(db: pg.Pool): Promise<LoggedStep[]> {
  const { rows } = await db.query<LoggedStep>(
    `SELECT key, fingerprint, (result->>'body')::jsonb->>'id' AS "chargeId",
            (extract(epoch FROM at) * 1000)::float8 AS at
     FROM soak_step_log ORDER BY at`,
  );
  return rows;
}
