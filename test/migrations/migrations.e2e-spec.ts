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

  it('creates the record and step tables, their primary keys and expires_at indexes, and drops them', async () => {
    const ran = await dataSource.runMigrations();
    expect(ran.map((m) => m.name)).toEqual([
      'CreateIdempotencyRecords1764000000000',
      'CreateIdempotencySteps1764000000001',
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

    await dataSource.undoLastMigration();
    await dataSource.undoLastMigration();
    const [{ exists }] = await db.query<{ exists: boolean }>(
      `SELECT (to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL) AS exists`,
      [IDEMPOTENCY_TABLE_NAME, IDEMPOTENCY_STEPS_TABLE_NAME],
    );
    expect(exists).toBe(false);
  });
});
