import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
  idempotencyMigrations,
} from '../../src/index.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

describe('shipped migrations', () => {
  let db: TestDatabase;
  let dataSource: DataSource;

  beforeAll(async () => {
    db = await createTestDatabase();
    dataSource = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: idempotencyMigrations,
    });
    await dataSource.initialize();
  });
  afterAll(async () => {
    await dataSource.destroy();
    await db.drop();
  });

  it('creates the record and step tables, their primary keys and expires_at indexes, the claim and complete functions, and drops them', async () => {
    const ran = await dataSource.runMigrations();
    expect(ran.map((m) => m.name)).toEqual([
      'CreateIdempotencyRecords1764000000000',
      'CreateIdempotencySteps1764000000001',
      'CreateIdempotencyFunctions1764000000002',
    ]);
    const functions = () =>
      db.query<{ name: string; arguments: string; volatility: string }>(
        `SELECT proname AS name, pg_get_function_identity_arguments(oid) AS arguments,
                provolatile AS volatility
         FROM pg_proc WHERE proname LIKE 'idempotency\\_%' ORDER BY proname`,
      );
    // Volatile: each statement inside sees what committed before it ran.
    expect(await functions()).toEqual([
      {
        name: 'idempotency_claim',
        arguments:
          'p_scope text, p_key text, p_fingerprint text, p_timeout text',
        volatility: 'v',
      },
      {
        name: 'idempotency_complete',
        arguments:
          'p_scope text, p_key text, p_fingerprint text, p_method text, p_path text, p_status text, p_response_status integer, p_response_headers jsonb, p_response_body bytea, p_ttl_ms double precision',
        volatility: 'v',
      },
    ]);

    const columns = await db.query<{
      column_name: string;
      data_type: string;
      is_nullable: string;
    }>(
      `SELECT column_name, data_type, is_nullable FROM information_schema.columns
       WHERE table_name = $1 ORDER BY ordinal_position`,
      [IDEMPOTENCY_TABLE_NAME],
    );
    expect(columns).toEqual([
      { column_name: 'scope', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'key', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'fingerprint', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'method', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'path', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'status', data_type: 'text', is_nullable: 'NO' },
      {
        column_name: 'response_status',
        data_type: 'smallint',
        is_nullable: 'YES',
      },
      {
        column_name: 'response_headers',
        data_type: 'jsonb',
        is_nullable: 'YES',
      },
      { column_name: 'response_body', data_type: 'bytea', is_nullable: 'YES' },
      {
        column_name: 'created_at',
        data_type: 'timestamp with time zone',
        is_nullable: 'NO',
      },
      {
        column_name: 'completed_at',
        data_type: 'timestamp with time zone',
        is_nullable: 'YES',
      },
      {
        column_name: 'expires_at',
        data_type: 'timestamp with time zone',
        is_nullable: 'NO',
      },
    ]);
    const indexes = await db.query<{ indexname: string; indexdef: string }>(
      `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname`,
      [IDEMPOTENCY_TABLE_NAME],
    );
    expect(indexes).toEqual([
      {
        indexname: 'IDX_idempotency_records_expires_at',
        indexdef: expect.stringContaining('USING btree (expires_at)'),
      },
      {
        indexname: 'PK_idempotency_records',
        indexdef: expect.stringContaining('USING btree (scope, key)'),
      },
    ]);

    const steps = await db.query<{ indexname: string; indexdef: string }>(
      `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname`,
      [IDEMPOTENCY_STEPS_TABLE_NAME],
    );
    expect(steps).toEqual([
      {
        indexname: 'IDX_idempotency_steps_expires_at',
        indexdef: expect.stringContaining('(expires_at)'),
      },
      {
        indexname: 'PK_idempotency_steps',
        indexdef: expect.stringContaining('(scope, key, step)'),
      },
    ]);

    // idempotency_complete takes over an expired record, never a live one.
    const complete = (body: string, ttlMs: number) =>
      db.query(
        `SELECT FROM idempotency_complete('s', 'k', 'f', 'POST', '/p', 'completed', 201, '{}', $1, $2)`,
        [Buffer.from(body), ttlMs],
      );
    const stored = async () =>
      (
        await db.query<{ body: Buffer }>(
          `SELECT response_body AS body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE scope = 's' AND key = 'k'`,
        )
      ).map((row) => row.body.toString());
    await complete('expired', -1000);
    await complete('live', 60_000);
    expect(await stored()).toEqual(['live']);
    await expect(complete('again', 60_000)).rejects.toMatchObject({
      code: '23505',
    });
    expect(await stored()).toEqual(['live']);
    await db.query(`DELETE FROM ${IDEMPOTENCY_TABLE_NAME}`);

    await dataSource.undoLastMigration();
    expect(await functions()).toEqual([]);
    await dataSource.undoLastMigration();
    await dataSource.undoLastMigration();
    const [{ exists }] = await db.query<{ exists: boolean }>(
      `SELECT (to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL) AS exists`,
      [IDEMPOTENCY_TABLE_NAME, IDEMPOTENCY_STEPS_TABLE_NAME],
    );
    expect(exists).toBe(false);
  });
});
