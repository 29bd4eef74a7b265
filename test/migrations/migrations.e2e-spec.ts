import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
  idempotencyMigrations,
} from '../../migrations/index.js';
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

  const functions = () =>
    db.query<{ name: string; arguments: string; volatility: string }>(
      `SELECT proname AS name, pg_get_function_identity_arguments(oid) AS arguments,
              provolatile AS volatility
       FROM pg_proc WHERE proname LIKE 'idempotency\\_%'
       ORDER BY proname, pg_get_function_identity_arguments(oid) COLLATE "C"`,
    );
  const columns = () =>
    db.query<{
      column_name: string;
      data_type: string;
      is_nullable: string;
      column_default: string | null;
    }>(
      `SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns
       WHERE table_name = $1 ORDER BY ordinal_position`,
      [IDEMPOTENCY_TABLE_NAME],
    );
  /** The columns of 0.1.0 and 0.2.0. */
  const RECORD_COLUMNS = [
    {
      column_name: 'scope',
      data_type: 'text',
      is_nullable: 'NO',
      column_default: null,
    },
    {
      column_name: 'key',
      data_type: 'text',
      is_nullable: 'NO',
      column_default: null,
    },
    {
      column_name: 'fingerprint',
      data_type: 'text',
      is_nullable: 'NO',
      column_default: null,
    },
    {
      column_name: 'method',
      data_type: 'text',
      is_nullable: 'NO',
      column_default: null,
    },
    {
      column_name: 'path',
      data_type: 'text',
      is_nullable: 'NO',
      column_default: null,
    },
    {
      column_name: 'status',
      data_type: 'text',
      is_nullable: 'NO',
      column_default: null,
    },
    {
      column_name: 'response_status',
      data_type: 'smallint',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'response_headers',
      data_type: 'jsonb',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'response_body',
      data_type: 'bytea',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'created_at',
      data_type: 'timestamp with time zone',
      is_nullable: 'NO',
      column_default: 'now()',
    },
    {
      column_name: 'completed_at',
      data_type: 'timestamp with time zone',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'expires_at',
      data_type: 'timestamp with time zone',
      is_nullable: 'NO',
      column_default: null,
    },
  ];
  /** What LeaseIdempotencyClaims1764000000003 adds. */
  const LEASE_COLUMNS = [
    {
      column_name: 'owner',
      data_type: 'uuid',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'owner_instance',
      data_type: 'uuid',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'lease_expires_at',
      data_type: 'timestamp with time zone',
      is_nullable: 'YES',
      column_default: null,
    },
    {
      column_name: 'waiting',
      data_type: 'boolean',
      is_nullable: 'NO',
      column_default: 'false',
    },
  ];
  /** What BindIdempotencySteps1764000000004 adds to the records. */
  const BIND_COLUMNS = [
    {
      column_name: 'has_steps',
      data_type: 'boolean',
      is_nullable: 'NO',
      column_default: 'false',
    },
  ];
  const stepColumns = async () =>
    (
      await db.query<{ column_name: string }>(
        `SELECT column_name FROM information_schema.columns
         WHERE table_name = $1 ORDER BY ordinal_position`,
        [IDEMPOTENCY_STEPS_TABLE_NAME],
      )
    ).map((column) => column.column_name);
  const STEP_COLUMNS = [
    'scope',
    'key',
    'step',
    'result',
    'created_at',
    'expires_at',
  ];
  /** The functions of 0.1.0 and 0.2.0, kept for a rolling upgrade. */
  const PREVIOUS_FUNCTIONS = [
    {
      name: 'idempotency_claim',
      arguments: 'p_scope text, p_key text, p_fingerprint text, p_timeout text',
      volatility: 'v',
    },
    {
      name: 'idempotency_complete',
      arguments:
        'p_scope text, p_key text, p_fingerprint text, p_method text, p_path text, p_status text, p_response_status integer, p_response_headers jsonb, p_response_body bytea, p_ttl_ms double precision',
      volatility: 'v',
    },
  ];
  /** The functions of the leased claims, which the module calls. */
  const LEASE_FUNCTIONS = [
    {
      name: 'idempotency_acquire',
      arguments:
        'p_scope text, p_key text, p_fingerprint text, p_method text, p_path text, p_owner uuid, p_instance uuid, p_lease_ms double precision, p_ttl_ms double precision, p_wait boolean',
      volatility: 'v',
    },
    {
      name: 'idempotency_finish',
      arguments:
        'p_scope text, p_key text, p_owner uuid, p_status text, p_response_status integer, p_response_headers jsonb, p_response_body bytea, p_ttl_ms double precision',
      volatility: 'v',
    },
    {
      name: 'idempotency_release',
      arguments: 'p_scope text, p_key text, p_owner uuid',
      volatility: 'v',
    },
    {
      name: 'idempotency_renew',
      arguments:
        'p_scopes text[], p_keys text[], p_owners uuid[], p_lease_ms double precision[]',
      volatility: 'v',
    },
    {
      name: 'idempotency_save_step',
      arguments:
        'p_scope text, p_key text, p_owner uuid, p_step text, p_result jsonb, p_ttl_ms double precision',
      volatility: 'v',
    },
  ];
  /** The functions of KeepIdempotencyGenerations1764000000005. */
  const GENERATION_FUNCTIONS = [
    {
      name: 'idempotency_acquire_generation',
      arguments:
        'p_scope text, p_key text, p_fingerprint text, p_method text, p_path text, p_owner uuid, p_instance uuid, p_lease_ms double precision, p_ttl_ms double precision, p_wait boolean',
      volatility: 'v',
    },
    {
      name: 'idempotency_release',
      arguments: 'p_scope text, p_key text, p_owner uuid, p_bind boolean',
      volatility: 'v',
    },
  ];
  /** The order of `functions()`: by name, then arguments (overloads). */
  const byName = (
    a: { name: string; arguments: string },
    b: { name: string; arguments: string },
  ) => {
    const [x, y] = [`${a.name} ${a.arguments}`, `${b.name} ${b.arguments}`];
    return x < y ? -1 : x > y ? 1 : 0;
  };
  const records = () =>
    db.query<{ key: string; status: string; waiting?: boolean }>(
      `SELECT * FROM ${IDEMPOTENCY_TABLE_NAME} ORDER BY key`,
    );

  it('creates the record and step tables, their primary keys and expires_at indexes, the functions and the lease columns, and drops them', async () => {
    const ran = await dataSource.runMigrations();
    expect(ran.map((m) => m.name)).toEqual([
      'CreateIdempotencyRecords1764000000000',
      'CreateIdempotencySteps1764000000001',
      'CreateIdempotencyFunctions1764000000002',
      'LeaseIdempotencyClaims1764000000003',
      'BindIdempotencySteps1764000000004',
      'KeepIdempotencyGenerations1764000000005',
      'CountIdempotencyFailures1764000000006',
      'DropIdempotencyStatusCheck1764000000007',
    ]);
    // Volatile: each statement inside sees what committed before it ran.
    expect(await functions()).toEqual(
      [...PREVIOUS_FUNCTIONS, ...LEASE_FUNCTIONS, ...GENERATION_FUNCTIONS].sort(
        byName,
      ),
    );
    expect(await columns()).toEqual([
      ...RECORD_COLUMNS,
      ...LEASE_COLUMNS,
      ...BIND_COLUMNS,
    ]);
    expect(await stepColumns()).toEqual([...STEP_COLUMNS, 'fingerprint']);
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

    const failures = await db.query<{ indexname: string; indexdef: string }>(
      `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'idempotency_failures' ORDER BY indexname`,
    );
    expect(failures).toEqual([
      {
        indexname: 'IDX_idempotency_failures_expires_at',
        indexdef: expect.stringContaining('(expires_at)'),
      },
      {
        indexname: 'PK_idempotency_failures',
        indexdef: expect.stringContaining('(scope, key)'),
      },
    ]);
    const failureTable = async () =>
      (
        await db.query<{ exists: boolean }>(
          `SELECT to_regclass('idempotency_failures') IS NOT NULL AS exists`,
        )
      )[0].exists;
    const checks = () =>
      db.query<{ name: string; definition: string }>(
        `SELECT conname AS name, pg_get_constraintdef(oid) AS definition
           FROM pg_constraint
          WHERE conrelid = $1::regclass AND contype = 'c'`,
        [IDEMPOTENCY_TABLE_NAME],
      );

    // No check on the records' status: the store checks what it reads.
    expect(await checks()).toEqual([]);
    await dataSource.undoLastMigration();
    expect(await checks()).toEqual([
      {
        name: 'CHK_idempotency_records_status',
        definition: expect.stringContaining(
          "ARRAY['in_progress'::text, 'completed'::text, 'failed'::text, 'not_replayable'::text]",
        ),
      },
    ]);
    await expect(
      db.query(
        `INSERT INTO ${IDEMPOTENCY_TABLE_NAME} (scope, key, fingerprint, method,
           path, status, expires_at)
         VALUES ('s', 'checked', 'f', 'POST', '/p', 'complete', now())`,
      ),
    ).rejects.toMatchObject({ code: '23514' });
    await dataSource.undoLastMigration();
    expect(await failureTable()).toBe(false);
    expect(await functions()).toEqual(
      [...PREVIOUS_FUNCTIONS, ...LEASE_FUNCTIONS, ...GENERATION_FUNCTIONS].sort(
        byName,
      ),
    );
    await dataSource.undoLastMigration();
    expect(await functions()).toEqual(
      [...PREVIOUS_FUNCTIONS, ...LEASE_FUNCTIONS].sort(byName),
    );
    await dataSource.undoLastMigration();
    expect(await columns()).toEqual([...RECORD_COLUMNS, ...LEASE_COLUMNS]);
    expect(await stepColumns()).toEqual(STEP_COLUMNS);
    expect(await functions()).toEqual(
      [...PREVIOUS_FUNCTIONS, ...LEASE_FUNCTIONS].sort(byName),
    );
    await dataSource.undoLastMigration();
    expect(await functions()).toEqual(PREVIOUS_FUNCTIONS);
    expect(await columns()).toEqual(RECORD_COLUMNS);
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

  it('keeps idempotency_complete of 0.2.0 working for instances not yet upgraded: it takes over an expired record, never a live one nor a leased claim', async () => {
    await dataSource.runMigrations();
    const complete = (key: string, body: string, ttlMs: number) =>
      db.query(
        `SELECT FROM idempotency_complete('s', $1, 'f', 'POST', '/p', 'completed', 201, '{}', $2, $3)`,
        [key, Buffer.from(body), ttlMs],
      );
    const stored = async (key: string) =>
      (
        await db.query<{ body: Buffer | null }>(
          `SELECT response_body AS body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE scope = 's' AND key = $1`,
          [key],
        )
      ).map((row) => row.body?.toString() ?? null);
    await complete('k', 'expired', -1000);
    await complete('k', 'live', 60_000);
    expect(await stored('k')).toEqual(['live']);
    await expect(complete('k', 'again', 60_000)).rejects.toMatchObject({
      code: '23505',
    });
    expect(await stored('k')).toEqual(['live']);

    // A key claimed by an upgraded instance: the old function refuses to
    // write over it, so the old instance's transaction rolls back.
    const [claim] = await db.query<{ acquired: boolean }>(
      `SELECT acquired FROM idempotency_acquire('s', 'leased', 'f', 'POST', '/p',
         gen_random_uuid(), NULL, 60000, 60000, false)`,
    );
    expect(claim.acquired).toBe(true);
    await expect(complete('leased', 'old', 60_000)).rejects.toMatchObject({
      code: '23505',
    });
    expect(await stored('leased')).toEqual([null]);
    await db.query(`DELETE FROM ${IDEMPOTENCY_TABLE_NAME}`);
    for (let i = 0; i < idempotencyMigrations.length; i += 1) {
      await dataSource.undoLastMigration();
    }
  });

  it('upgrades the table of 0.2.0 in place: no rewrite, no record lost; down deletes only the claims in progress, and up runs again', async () => {
    const previous = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: idempotencyMigrations.slice(0, 3),
    });
    await previous.initialize();
    try {
      expect((await previous.runMigrations()).map((m) => m.name)).toEqual([
        'CreateIdempotencyRecords1764000000000',
        'CreateIdempotencySteps1764000000001',
        'CreateIdempotencyFunctions1764000000002',
      ]);
    } finally {
      await previous.destroy();
    }
    // A record that 0.2.0 completed.
    await db.query(
      `SELECT idempotency_complete('s', 'done', 'f', 'POST', '/p', 'completed', 201, '{}', '\\x7b7d', 60000)`,
    );
    const file = async () =>
      (
        await db.query<{ file: string }>(
          `SELECT pg_relation_filenode($1)::text AS file`,
          [IDEMPOTENCY_TABLE_NAME],
        )
      )[0].file;
    const before = await file();

    expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
      'LeaseIdempotencyClaims1764000000003',
      'BindIdempotencySteps1764000000004',
      'KeepIdempotencyGenerations1764000000005',
      'CountIdempotencyFailures1764000000006',
      'DropIdempotencyStatusCheck1764000000007',
    ]);
    expect(await file()).toBe(before);
    expect(await records()).toEqual([
      expect.objectContaining({
        key: 'done',
        status: 'completed',
        owner: null,
        owner_instance: null,
        lease_expires_at: null,
        waiting: false,
      }),
    ]);

    // A claim in progress has no meaning to 0.2.0: down deletes it, and
    // keeps the finished records.
    await db.query(
      `SELECT FROM idempotency_acquire('s', 'running', 'f', 'POST', '/p',
         gen_random_uuid(), NULL, 60000, 60000, false)`,
    );
    expect((await records()).map((r) => [r.key, r.status])).toEqual([
      ['done', 'completed'],
      ['running', 'in_progress'],
    ]);
    for (let i = 0; i < 5; i += 1) {
      await dataSource.undoLastMigration();
    }
    expect(await columns()).toEqual(RECORD_COLUMNS);
    expect(await functions()).toEqual(PREVIOUS_FUNCTIONS);
    expect((await records()).map((r) => [r.key, r.status])).toEqual([
      ['done', 'completed'],
    ]);

    // Up again, as after a rollback of the release and a new deployment.
    expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
      'LeaseIdempotencyClaims1764000000003',
      'BindIdempotencySteps1764000000004',
      'KeepIdempotencyGenerations1764000000005',
      'CountIdempotencyFailures1764000000006',
      'DropIdempotencyStatusCheck1764000000007',
    ]);
    expect(await columns()).toEqual([
      ...RECORD_COLUMNS,
      ...LEASE_COLUMNS,
      ...BIND_COLUMNS,
    ]);
    expect(await functions()).toEqual(
      [...PREVIOUS_FUNCTIONS, ...LEASE_FUNCTIONS, ...GENERATION_FUNCTIONS].sort(
        byName,
      ),
    );
    const [claim] = await db.query<{ acquired: boolean }>(
      `SELECT acquired FROM idempotency_acquire('s', 'again', 'f', 'POST', '/p',
         gen_random_uuid(), NULL, 60000, 60000, false)`,
    );
    expect(claim.acquired).toBe(true);
    expect((await records()).map((r) => [r.key, r.status])).toEqual([
      ['again', 'in_progress'],
      ['done', 'completed'],
    ]);
    await db.query(`DELETE FROM ${IDEMPOTENCY_TABLE_NAME}`);
    for (let i = 0; i < idempotencyMigrations.length; i += 1) {
      await dataSource.undoLastMigration();
    }
  });
});
