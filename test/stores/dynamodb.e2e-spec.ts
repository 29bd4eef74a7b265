import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import {
  DescribeTableCommand,
  DynamoDBClient,
  GetItemCommand,
  ScanCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import {
  IdempotencyConfigurationError,
  IdempotencyStepTooLargeError,
} from '../../src/index.js';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import type {
  AbandonedKey,
  ClaimRequest,
  StepLease,
} from '../../src/interfaces/idempotency-store.interface.js';
import { partitionKey } from '../../src/stores/dynamodb/dynamodb-item.js';
import {
  dynaliteFeatures,
  startDynalite,
  type LocalDynamoDb,
} from '../utils/dynalite.js';
import { describeStoreConformance } from './conformance.js';

const HOUR_MS = 3_600_000;

describeStoreConformance(
  'DynamoDB',
  async () => {
    const dynamo = await startDynalite();
    const client = dynamo.client();
    await DynamoDbIdempotencyStore.createTable(client, { timeToLive: false });
    return {
      store: new DynamoDbIdempotencyStore(client),
      close: () => dynamo.close(),
    };
  },
  { resentClaims: true, resentCompletions: true },
);

/** The commands a client sends: name and input. */
function recordCommands(client: DynamoDBClient) {
  const sent: Array<{ name: string; input: Record<string, unknown> }> = [];
  client.middlewareStack.add(
    (next, context) => (args) => {
      sent.push({
        name: context.commandName as string,
        input: args.input as Record<string, unknown>,
      });
      return next(args);
    },
    { step: 'initialize', name: 'recordCommands' },
  );
  return sent;
}

describe('the DynamoDB store', () => {
  const tableName = 'idempotency_store_spec';
  let dynamo: LocalDynamoDb;
  let client: DynamoDBClient;
  let store: DynamoDbIdempotencyStore;
  let sent: ReturnType<typeof recordCommands>;

  beforeAll(async () => {
    dynamo = await startDynalite();
    client = dynamo.client();
    await DynamoDbIdempotencyStore.createTable(client, {
      tableName,
      timeToLive: false,
    });
    store = new DynamoDbIdempotencyStore(client, { tableName });
    sent = recordCommands(client);
  });
  afterAll(() => dynamo?.close());
  beforeEach(() => {
    sent.length = 0;
    dynaliteFeatures.returnItemOnConditionFailure = true;
  });

  const attempt = (key: string, scope = 'dynamo'): ClaimRequest => ({
    scope,
    key,
    owner: randomUUID(),
    fingerprint: 'fp',
    method: 'POST',
    path: '/dynamo',
    leaseMs: 60_000,
    ttlMs: HOUR_MS,
    wait: false,
  });
  const completion = {
    status: 'completed',
    response: { status: 200, headers: {}, body: Buffer.from('ok') },
    ttlMs: HOUR_MS,
  } as const;
  const itemOf = async (scope: string, key: string) =>
    (
      await client.send(
        new GetItemCommand({
          TableName: tableName,
          Key: { pk: { S: partitionKey(scope, key) } },
          ConsistentRead: true,
        }),
      )
    ).Item;

  it("completes outside the handler's transaction and has no notifications", () => {
    expect(store.completesInTransaction).toBe(false);
    expect(store.watching).toBe(false);
  });

  it('refuses a table name or a page size DynamoDB would not take, saying what to do', () => {
    for (const options of [
      { tableName: 'ab' },
      { tableName: 'records; DROP' },
      { scanPageSize: 0 },
      { scanPageSize: 1.5 },
    ]) {
      expect(() => new DynamoDbIdempotencyStore(client, options)).toThrow(
        IdempotencyConfigurationError,
      );
    }
    expect(
      () => new DynamoDbIdempotencyStore(client, { tableName: 'x' }),
    ).toThrow(/Potential solutions:\n- Use 3 to 255 letters/);
  });

  it('loads the AWS SDK only when the store is used: no static import in its sources', async () => {
    const folder = new URL('../../src/stores/dynamodb/', import.meta.url);
    const sources = (await readdir(folder)).filter((file) =>
      file.endsWith('.ts'),
    );
    expect(sources.length).toBeGreaterThan(3);
    for (const file of sources) {
      const text = await readFile(new URL(file, folder), 'utf8');
      expect({
        file,
        imports: text.match(/^import (?!type )[^;]*'@aws-sdk\/[^']+';/gm),
      }).toEqual({ file, imports: null });
    }
  });

  it('creates its table (partition key pk), keeps one that exists, and enables TTL on attribute ttl', async () => {
    const provisioning = dynamo.client();
    const commands = recordCommands(provisioning);
    const name = 'idempotency_provisioned';
    // dynalite has no UpdateTimeToLive: what matters is the request sent.
    await DynamoDbIdempotencyStore.createTable(provisioning, {
      tableName: name,
    }).catch(() => undefined);
    expect(
      commands.find((command) => command.name === 'UpdateTimeToLiveCommand')
        ?.input,
    ).toEqual({
      TableName: name,
      TimeToLiveSpecification: { AttributeName: 'ttl', Enabled: true },
    });
    await DynamoDbIdempotencyStore.createTable(provisioning, {
      tableName: name,
      timeToLive: false,
    });
    const { Table: table } = await provisioning.send(
      new DescribeTableCommand({ TableName: name }),
    );
    expect(table).toMatchObject({
      TableStatus: 'ACTIVE',
      KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
    });
    const provisioned = new DynamoDbIdempotencyStore(provisioning, {
      tableName: name,
    });
    expect(await provisioned.claim(attempt('provisioned'))).toMatchObject({
      state: 'claimed',
    });
  });

  it('refuses a claim in one request: the refusal carries the record', async () => {
    const first = attempt('one-request');
    await store.claim(first);
    await store.complete(first, completion, undefined);
    sent.length = 0;
    expect(await store.claim(attempt('one-request'))).toMatchObject({
      state: 'finished',
      record: { status: 'completed', response: { status: 200 } },
    });
    expect(sent.map((command) => command.name)).toEqual(['UpdateItemCommand']);
    expect(sent[0].input).toMatchObject({
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    });

    sent.length = 0;
    const busy = attempt('one-request-busy');
    await store.claim(busy);
    sent.length = 0;
    expect(await store.claim(attempt('one-request-busy'))).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });
    expect(sent).toHaveLength(1);
  });

  it('reads the record with a consistent read when the server does not return it with the refusal', async () => {
    dynaliteFeatures.returnItemOnConditionFailure = false;
    const first = attempt('fallback');
    await store.claim(first);
    sent.length = 0;
    expect(await store.claim(attempt('fallback'))).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });
    expect(sent.map((command) => command.name)).toEqual([
      'UpdateItemCommand',
      'GetItemCommand',
    ]);
    expect(sent[1].input).toMatchObject({ ConsistentRead: true });
  });

  it('reads steps and collects with consistent reads', async () => {
    const claim = attempt('consistent');
    await store.claim(claim);
    await store.saveStep(claim, 'charge', 1, HOUR_MS);
    sent.length = 0;
    expect(await store.readStep(claim, 'charge')).toEqual({ result: 1 });
    await store.collect(10, () => undefined);
    const reads = sent.filter((command) =>
      ['GetItemCommand', 'ScanCommand', 'QueryCommand'].includes(command.name),
    );
    expect(reads.map((command) => command.name)).toEqual([
      'GetItemCommand',
      'ScanCommand',
    ]);
    for (const read of reads) {
      expect(read.input).toMatchObject({ ConsistentRead: true });
    }
  });

  it('sets the TTL attribute of a finished record to its expiry in epoch seconds, and none on a claim', async () => {
    const claim = attempt('ttl');
    await store.claim(claim);
    expect((await itemOf('dynamo', 'ttl'))?.ttl).toBeUndefined();
    const before = Date.now();
    await store.complete(claim, completion, undefined);
    const after = Date.now();
    const item = await itemOf('dynamo', 'ttl');
    const ttl = Number(item?.ttl?.N);
    const expiresAt = Number(item?.expires_at?.N);
    expect(expiresAt).toBeGreaterThanOrEqual(before + HOUR_MS);
    expect(expiresAt).toBeLessThanOrEqual(after + HOUR_MS);
    expect(ttl).toBe(Math.ceil(expiresAt / 1000));
  });

  it('claims an item whose own expiry passed while DynamoDB has not deleted it yet', async () => {
    const claim = attempt('expired-present');
    await store.claim(claim);
    await store.complete(claim, { ...completion, ttlMs: 0 }, undefined);
    // Still there: TTL deletes late (and only on epoch seconds past).
    expect((await itemOf('dynamo', 'expired-present'))?.status).toEqual({
      S: 'completed',
    });
    const next = attempt('expired-present');
    expect(await store.claim(next)).toMatchObject({ state: 'claimed' });
    expect(await itemOf('dynamo', 'expired-present')).toMatchObject({
      status: { S: 'in_progress' },
      owner: { S: next.owner },
    });
    expect((await itemOf('dynamo', 'expired-present'))?.response_body).toBe(
      undefined,
    );
  });

  it('keeps keys and scopes apart whatever their characters: no separator to forge', async () => {
    // A naive "scope:key" join would make these two one record.
    const a = attempt('b:c', 'a');
    const b = attempt('c', 'a:b');
    expect(await store.claim(a)).toMatchObject({ state: 'claimed' });
    expect(await store.claim(b)).toMatchObject({ state: 'claimed' });
    const long = attempt('k'.repeat(10_000), 'λ'.repeat(1_000));
    expect(await store.claim(long)).toMatchObject({ state: 'claimed' });
    expect(await itemOf(long.scope, long.key)).toMatchObject({
      scope: { S: long.scope },
      key: { S: long.key },
    });
    // Strings that UTF-8 would make one (lone surrogates) stay two records.
    expect(await store.claim(attempt('\ud800'))).toMatchObject({
      state: 'claimed',
    });
    expect(await store.claim(attempt('\ufffd'))).toMatchObject({
      state: 'claimed',
    });
    // The key's characters never reach an expression: steps of any name too.
    const step = "x'] OR #owner <> :owner; steps.#y";
    expect(await store.saveStep(a, step, { ok: true }, HOUR_MS)).toBe(true);
    expect(await store.readStep(a, step)).toEqual({ result: { ok: true } });
    expect(await store.readStep(b, step)).toBeUndefined();
  });

  it('records a response too large for an item as not replayable, keeping its status', async () => {
    const claim = attempt('huge');
    await store.claim(claim);
    sent.length = 0;
    const body = Buffer.alloc(500 * 1024, 1);
    expect(
      await store.complete(
        claim,
        { ...completion, response: { status: 201, headers: {}, body } },
        undefined,
      ),
    ).toEqual({ fenced: true, waiting: false });
    // Never sent: the size is known before the write.
    expect(sent).toHaveLength(1);
    expect(sent[0].input).not.toHaveProperty([
      'ExpressionAttributeValues',
      ':body',
    ]);
    expect(await store.claim(attempt('huge'))).toEqual({
      state: 'finished',
      record: {
        status: 'not_replayable',
        fingerprint: 'fp',
        response: { status: 201, headers: {}, body: Buffer.alloc(0) },
      },
    });
  });

  it('stores a response just under the limit byte for byte', async () => {
    const claim = attempt('large');
    await store.claim(claim);
    const body = Buffer.alloc(390 * 1024, 7);
    await store.complete(
      claim,
      { ...completion, response: { status: 200, headers: {}, body } },
      undefined,
    );
    const outcome = await store.claim(attempt('large'));
    expect(outcome).toMatchObject({ state: 'finished' });
    const { record } = outcome as {
      record: { status: string; response: { body: Buffer } };
    };
    expect(record.status).toBe('completed');
    expect(record.response.body.equals(body)).toBe(true);
  });

  it('refuses a step result too large for an item with a clear error, before writing', async () => {
    const claim = attempt('huge-step');
    await store.claim(claim);
    sent.length = 0;
    await expect(
      store.saveStep(claim, 'report', 'x'.repeat(500 * 1024), HOUR_MS),
    ).rejects.toThrow(
      new IdempotencyStepTooLargeError(
        'report',
        512002,
        400 * 1024 - 'report'.length - claim.fingerprint.length - 2048,
        "it does not fit in DynamoDB's item of 400 KB, which holds the record and all the steps of its key: store a reference to the result instead",
      ),
    );
    expect(sent).toHaveLength(0);
    expect(await store.readStep(claim, 'report')).toBeUndefined();
  });

  it('refuses steps that together overflow the item with the same error, and keeps the others', async () => {
    const claim = attempt('many-steps');
    await store.claim(claim);
    const part = 'y'.repeat(150 * 1024);
    expect(await store.saveStep(claim, 'one', part, HOUR_MS)).toBe(true);
    expect(await store.saveStep(claim, 'two', part, HOUR_MS)).toBe(true);
    await expect(store.saveStep(claim, 'three', part, HOUR_MS)).rejects.toThrow(
      /The result of step "three" .* does not fit in DynamoDB's item of 400 KB/,
    );
    await expect(
      store.saveStep(claim, 'three', part, HOUR_MS),
    ).rejects.toBeInstanceOf(IdempotencyStepTooLargeError);
    expect(await store.readStep(claim, 'one')).toEqual({ result: part });
    expect(await store.readStep(claim, 'three')).toBeUndefined();
  });

  it('keeps a released claim with steps for the next attempt, and deletes one without', async () => {
    const bare = attempt('release-bare');
    await store.claim(bare);
    await store.release(bare);
    expect(await itemOf('dynamo', 'release-bare')).toBeUndefined();

    const stepped = attempt('release-steps');
    await store.claim(stepped);
    await store.saveStep(stepped, 'charge', 'ch_1', HOUR_MS);
    expect(await store.release(stepped)).toEqual({
      fenced: true,
      waiting: false,
    });
    const item = await itemOf('dynamo', 'release-steps');
    expect(item?.owner).toBeUndefined();
    expect(item?.lease_expires_at).toEqual({ N: '0' });
    expect(await store.renew([{ ...stepped, durationMs: HOUR_MS }])).toEqual(
      new Set(),
    );
  });

  /** The generation a claim was granted with. */
  const generationOf = async (claim: ClaimRequest) => {
    const outcome = await store.claim(claim);
    expect(outcome).toMatchObject({ state: 'claimed' });
    return (outcome as { generation: string }).generation;
  };

  it("keeps the key's generation in the item (attribute generation), written and returned by the claim's one request, and removed by the completion", async () => {
    sent.length = 0;
    const first = attempt('generation-layout');
    const generation = await generationOf(first);
    expect(generation).toMatch(/^[0-9a-f-]{36}$/);
    expect(sent.map((command) => command.name)).toEqual(['UpdateItemCommand']);
    expect(sent[0].input).toMatchObject({ ReturnValues: 'UPDATED_NEW' });
    expect((await itemOf('dynamo', 'generation-layout'))?.generation).toEqual({
      S: generation,
    });
    // The claim resent after a lost reply: the same generation.
    expect(await store.claim(first)).toMatchObject({
      state: 'claimed',
      generation,
    });

    // Released to bind it: the item stays, ownerless, in one request.
    sent.length = 0;
    expect(await store.release(first, true)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(sent.map((command) => command.name)).toEqual(['UpdateItemCommand']);
    expect(await itemOf('dynamo', 'generation-layout')).toMatchObject({
      status: { S: 'in_progress' },
      lease_expires_at: { N: '0' },
      generation: { S: generation },
      bound: { BOOL: true },
    });
    expect(
      (await itemOf('dynamo', 'generation-layout'))?.owner,
    ).toBeUndefined();

    // Another request is refused; the same one claims it in one request,
    // with the same generation.
    expect(
      await store.claim({
        ...attempt('generation-layout'),
        fingerprint: 'other',
      }),
    ).toMatchObject({ state: 'in_progress', fingerprint: 'fp' });
    const retry = attempt('generation-layout');
    sent.length = 0;
    expect(await generationOf(retry)).toBe(generation);
    expect(sent).toHaveLength(1);
    await store.complete(retry, { ...completion, ttlMs: 0 }, undefined);
    const finished = await itemOf('dynamo', 'generation-layout');
    expect(finished?.generation).toBeUndefined();
    expect(finished?.bound).toBeUndefined();

    // Expired, the record is claimed in one request, with a new generation.
    sent.length = 0;
    const next = await generationOf(attempt('generation-layout'));
    expect(next).not.toBe(generation);
    expect(sent).toHaveLength(1);
  });

  it('starts a new generation over a claim past its expiry that still carries its own, in a second request', async () => {
    const abandoned = { ...attempt('generation-stale'), leaseMs: 0, ttlMs: 0 };
    const stale = await generationOf(abandoned);
    sent.length = 0;
    const next = attempt('generation-stale');
    const generation = await generationOf(next);
    expect(generation).not.toBe(stale);
    expect(sent.map((command) => command.name)).toEqual([
      'UpdateItemCommand',
      'UpdateItemCommand',
    ]);
    expect(await itemOf('dynamo', 'generation-stale')).toMatchObject({
      owner: { S: next.owner },
      generation: { S: generation },
    });
    // A server that does not return the item with the refusal: one read more.
    await store.release(next, true);
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: partitionKey('dynamo', 'generation-stale') } },
        UpdateExpression: 'SET expires_at = :past',
        ExpressionAttributeValues: { ':past': { N: '1' } },
      }),
    );
    dynaliteFeatures.returnItemOnConditionFailure = false;
    sent.length = 0;
    const third = await generationOf(attempt('generation-stale'));
    expect(new Set([stale, generation, third]).size).toBe(3);
    expect(sent.map((command) => command.name)).toEqual([
      'UpdateItemCommand',
      'GetItemCommand',
      'UpdateItemCommand',
    ]);
  });

  it('keeps the generation of a key past its own expiry while a step binds it, for the same request only', async () => {
    const first = { ...attempt('generation-bound'), leaseMs: 0, ttlMs: 0 };
    const generation = await generationOf(first);
    expect(await store.saveStep(first, 'charge', 'ch_1', HOUR_MS)).toBe(true);
    await store.release(first, true);
    expect(
      await store.claim({
        ...first,
        owner: randomUUID(),
        fingerprint: 'other',
      }),
    ).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });
    sent.length = 0;
    expect(await generationOf(attempt('generation-bound'))).toBe(generation);
    expect(sent).toHaveLength(1);
  });

  it('starts a generation, and keeps it from then on, for a claim written by the previous version without one', async () => {
    const legacy = attempt('generation-legacy');
    await store.claim(legacy);
    // The claim as the previous version of the store left it: no generation,
    // its lease run out (its instance died).
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: partitionKey('dynamo', 'generation-legacy') } },
        UpdateExpression: 'SET lease_expires_at = :past REMOVE generation',
        ExpressionAttributeValues: { ':past': { N: '1' } },
      }),
    );
    sent.length = 0;
    const takeover = { ...attempt('generation-legacy'), leaseMs: 0 };
    const generation = await generationOf(takeover);
    expect(sent).toHaveLength(1);
    expect(await generationOf(attempt('generation-legacy'))).toBe(generation);
  });

  it('binds a key to the request of its steps in the item: each step carries its fingerprint, bound_until their latest expiry; a refusal of another request is one request', async () => {
    const claim = attempt('bound-layout');
    await store.claim(claim);
    const before = Date.now();
    expect(await store.saveStep(claim, 'charge', 'ch_1', HOUR_MS)).toBe(true);
    const after = Date.now();
    let item = await itemOf('dynamo', 'bound-layout');
    expect(item?.steps?.M?.charge?.M).toMatchObject({
      r: { S: '"ch_1"' },
      f: { S: 'fp' },
    });
    const boundUntil = item?.bound_until;
    expect(boundUntil).toEqual(item?.steps?.M?.charge?.M?.e);
    expect(Number(boundUntil?.N)).toBeGreaterThanOrEqual(before + HOUR_MS);
    expect(Number(boundUntil?.N)).toBeLessThanOrEqual(after + HOUR_MS);

    // A step of a shorter life does not shorten the binding (a second write).
    sent.length = 0;
    expect(await store.saveStep(claim, 'receipt', 'r_1', 0)).toBe(true);
    expect(sent.map((command) => command.name)).toEqual([
      'UpdateItemCommand',
      'UpdateItemCommand',
    ]);
    item = await itemOf('dynamo', 'bound-layout');
    expect(item?.bound_until).toEqual(boundUntil);
    expect(item?.steps?.M?.receipt?.M?.f).toEqual({ S: 'fp' });
    // The owner's token with another request's fingerprint writes nothing.
    sent.length = 0;
    expect(
      await store.saveStep(
        { ...claim, fingerprint: 'other' },
        'charge',
        'ch_x',
        HOUR_MS,
      ),
    ).toBe(false);
    expect(sent).toHaveLength(1);
    expect(
      await store.readStep({ ...claim, fingerprint: 'other' }, 'charge'),
    ).toBeUndefined();

    // Released, the item stays a claim with no owner, still bound.
    expect(await store.release(claim)).toEqual({
      fenced: true,
      waiting: false,
    });
    item = await itemOf('dynamo', 'bound-layout');
    expect(item).toMatchObject({
      status: { S: 'in_progress' },
      fingerprint: { S: 'fp' },
      lease_expires_at: { N: '0' },
      bound_until: boundUntil,
    });
    expect(item?.owner).toBeUndefined();
    const other = { ...attempt('bound-layout'), fingerprint: 'other' };
    sent.length = 0;
    expect(await store.claim(other)).toEqual({
      state: 'in_progress',
      fingerprint: 'fp',
      leaseMs: 0,
    });
    expect(sent.map((command) => command.name)).toEqual(['UpdateItemCommand']);
    // A server that does not return the item: one read more, no retries.
    dynaliteFeatures.returnItemOnConditionFailure = false;
    sent.length = 0;
    expect(await store.claim(other)).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });
    expect(sent.map((command) => command.name)).toEqual([
      'UpdateItemCommand',
      'GetItemCommand',
    ]);
    dynaliteFeatures.returnItemOnConditionFailure = true;

    // The completion clears the steps and the binding.
    const retry = attempt('bound-layout');
    expect(await store.claim(retry)).toMatchObject({ state: 'claimed' });
    await store.complete(retry, completion, undefined);
    item = await itemOf('dynamo', 'bound-layout');
    expect(item?.steps).toBeUndefined();
    expect(item?.bound_until).toBeUndefined();
  });

  it('frees a key for another request once the steps that bound it expired', async () => {
    const claim = attempt('bound-expired');
    await store.claim(claim);
    expect(await store.saveStep(claim, 'charge', 'ch_1', 0)).toBe(true);
    await store.release(claim);
    const other = { ...attempt('bound-expired'), fingerprint: 'other' };
    expect(await store.claim(other)).toMatchObject({ state: 'claimed' });
    expect(await store.readStep(other, 'charge')).toBeUndefined();
    expect(await store.readStep(claim, 'charge')).toBeUndefined();
    // Nothing left for the collections of the tests below.
    await store.complete(other, completion, undefined);
  });

  it('reads a step saved before steps carried a fingerprint for any request of its key, which it does not bind', async () => {
    const claim = attempt('legacy-step');
    await store.claim(claim);
    // A step as the previous version of the store wrote it.
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: partitionKey('dynamo', 'legacy-step') } },
        UpdateExpression: 'SET steps.#step = :step',
        ExpressionAttributeNames: { '#step': 'charge' },
        ExpressionAttributeValues: {
          ':step': {
            M: { r: { S: '"ch_1"' }, e: { N: String(Date.now() + HOUR_MS) } },
          },
        },
      }),
    );
    await store.release(claim);
    expect((await itemOf('dynamo', 'legacy-step'))?.steps).toBeDefined();
    const other = { ...attempt('legacy-step'), fingerprint: 'other' };
    expect(await store.claim(other)).toMatchObject({ state: 'claimed' });
    expect(await store.readStep(other, 'charge')).toEqual({ result: 'ch_1' });
  });

  /** The handle of a granted claim, as the module hands it back. */
  const handleOf = async (claim: ClaimRequest) => {
    const outcome = await store.claim(claim);
    expect(outcome).toMatchObject({ state: 'claimed' });
    return (outcome as { lease: StepLease }).lease;
  };

  it("marks a key bound to its request in the item (bound) by bind()'s one request, fenced by the owner and the fingerprint; kept by releases and by the claims of the same request, each one request, and removed by the completion", async () => {
    const claim = attempt('bind-layout');
    const lease = await handleOf(claim);
    expect((await itemOf('dynamo', 'bind-layout'))?.bound).toEqual({
      BOOL: false,
    });
    sent.length = 0;
    expect(await store.bind(lease)).toBe(true);
    expect(sent.map((command) => command.name)).toEqual(['UpdateItemCommand']);
    expect(sent[0].input).toMatchObject({
      UpdateExpression: 'SET bound = :true',
    });
    expect(await itemOf('dynamo', 'bind-layout')).toMatchObject({
      status: { S: 'in_progress' },
      owner: { S: claim.owner },
      fingerprint: { S: 'fp' },
      bound: { BOOL: true },
    });
    // Sent again after a lost reply: the claim is still its own.
    expect(await store.bind(lease)).toBe(true);
    // Another owner, or the owner's token with another request's
    // fingerprint, binds nothing.
    expect(await store.bind({ ...claim, owner: randomUUID() })).toBe(false);
    expect(await store.bind({ ...claim, fingerprint: 'other' })).toBe(false);

    // Released without being told to bind: the handle knows the key bound,
    // and keeps the item in one UpdateItem.
    sent.length = 0;
    expect(await store.release(lease)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(sent.map((command) => command.name)).toEqual(['UpdateItemCommand']);
    let item = await itemOf('dynamo', 'bind-layout');
    expect(item).toMatchObject({
      status: { S: 'in_progress' },
      lease_expires_at: { N: '0' },
      bound: { BOOL: true },
    });
    expect(item?.owner).toBeUndefined();
    const other = { ...attempt('bind-layout'), fingerprint: 'other' };
    sent.length = 0;
    expect(await store.claim(other)).toEqual({
      state: 'in_progress',
      fingerprint: 'fp',
      leaseMs: 0,
    });
    expect(sent).toHaveLength(1);

    // The same request claims it in one request, and its handle knows the
    // key bound: told to bind it, its release writes no mark again.
    sent.length = 0;
    const retry = await handleOf(attempt('bind-layout'));
    expect(sent).toHaveLength(1);
    sent.length = 0;
    expect(await store.release(retry, true)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(sent.map((command) => command.input.UpdateExpression)).toEqual([
      'SET lease_expires_at = :zero REMOVE #owner, waiting',
    ]);
    expect(await store.claim(other)).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });

    // The completion ends the binding.
    const last = attempt('bind-layout');
    await store.claim(last);
    await store.complete(last, completion, undefined);
    item = await itemOf('dynamo', 'bind-layout');
    expect(item?.status).toEqual({ S: 'completed' });
    expect(item?.bound).toBeUndefined();
  });

  it('marks a key bound by the one UpdateItem of a release told to bind it; a release of a bound key without its handle keeps the item after its refused DeleteItem', async () => {
    const lease = await handleOf(attempt('bind-release'));
    sent.length = 0;
    expect(await store.release(lease, true)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(sent.map((command) => command.input.UpdateExpression)).toEqual([
      'SET lease_expires_at = :zero, bound = :true REMOVE #owner, waiting',
    ]);
    expect((await itemOf('dynamo', 'bind-release'))?.bound).toEqual({
      BOOL: true,
    });

    // A bare lease (the claim request itself) knows nothing of the binding.
    const retry = attempt('bind-release');
    expect(await store.claim(retry)).toMatchObject({ state: 'claimed' });
    sent.length = 0;
    expect(await store.release(retry)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(sent.map((command) => command.name)).toEqual([
      'DeleteItemCommand',
      'UpdateItemCommand',
    ]);
    const item = await itemOf('dynamo', 'bind-release');
    expect(item).toMatchObject({
      lease_expires_at: { N: '0' },
      bound: { BOOL: true },
    });
    expect(item?.owner).toBeUndefined();
    expect(
      await store.claim({ ...attempt('bind-release'), fingerprint: 'other' }),
    ).toMatchObject({ state: 'in_progress', fingerprint: 'fp' });
  });

  it('keeps a key bound as long as it lives: each claim of its request pushes its expiry on; once expired, another request claims it with a new generation, unbound', async () => {
    // Its time to live ends with its lease's first minute.
    const first = { ...attempt('bind-expiry'), ttlMs: 0 };
    const lease = await handleOf(first);
    const generation = (await itemOf('dynamo', 'bind-expiry'))?.generation;
    expect(await store.bind(lease)).toBe(true);
    await store.release(lease);
    const before = Date.now();
    const retry = await handleOf(attempt('bind-expiry'));
    let item = await itemOf('dynamo', 'bind-expiry');
    expect(item).toMatchObject({ generation, bound: { BOOL: true } });
    expect(Number(item?.expires_at?.N)).toBeGreaterThanOrEqual(
      before + HOUR_MS,
    );
    await store.release(retry);

    // Its expiry passed (the collector has not deleted it yet).
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: partitionKey('dynamo', 'bind-expiry') } },
        UpdateExpression: 'SET expires_at = :past',
        ExpressionAttributeValues: { ':past': { N: '1' } },
      }),
    );
    const other = { ...attempt('bind-expiry'), fingerprint: 'other' };
    const released = await handleOf(other);
    item = await itemOf('dynamo', 'bind-expiry');
    expect(item).toMatchObject({
      fingerprint: { S: 'other' },
      bound: { BOOL: false },
    });
    expect(item?.generation).not.toEqual(generation);
    // Unbound, its release deletes it in one request.
    sent.length = 0;
    await store.release(released);
    expect(sent.map((command) => command.name)).toEqual(['DeleteItemCommand']);
    expect(await itemOf('dynamo', 'bind-expiry')).toBeUndefined();
  });

  it('claims unbound a finished record that the previous version completed with the mark of its binding left in it', async () => {
    const claim = attempt('bind-legacy-finished');
    expect(await store.bind(await handleOf(claim))).toBe(true);
    // Completed and expired, as the previous version's completion left it:
    // its generation removed, the mark it did not know of kept.
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: { pk: { S: partitionKey('dynamo', 'bind-legacy-finished') } },
        UpdateExpression:
          'SET #status = :completed, expires_at = :past REMOVE lease_expires_at, generation',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: {
          ':completed': { S: 'completed' },
          ':past': { N: '1' },
        },
      }),
    );
    const other = { ...attempt('bind-legacy-finished'), fingerprint: 'other' };
    sent.length = 0;
    await handleOf(other);
    // The first write is refused for the mark; the second resets it.
    expect(sent.map((command) => command.name)).toEqual([
      'UpdateItemCommand',
      'UpdateItemCommand',
    ]);
    expect(await itemOf('dynamo', 'bind-legacy-finished')).toMatchObject({
      owner: { S: other.owner },
      fingerprint: { S: 'other' },
      bound: { BOOL: false },
    });
  });

  it('deletes nothing of a key claimed again between the Scan and the deletion', async () => {
    // A collector whose Scan is followed, before its deletions, by a claim.
    const collecting = dynamo.client();
    const collector = new DynamoDbIdempotencyStore(collecting, { tableName });
    const scope = `interleaved-${randomUUID()}`;
    const abandoned = { ...attempt('abandoned', scope), leaseMs: 0, ttlMs: 0 };
    const retry = attempt('abandoned', scope);
    let interleaved = false;
    collecting.middlewareStack.add(
      (next, context) => async (args) => {
        const output = await next(args);
        if (context.commandName === 'ScanCommand' && !interleaved) {
          interleaved = true;
          expect(await store.claim(retry)).toMatchObject({ state: 'claimed' });
        }
        return output;
      },
      { step: 'initialize', name: 'claimAfterScan' },
    );
    await store.claim(abandoned);
    expect(await store.saveStep(abandoned, 'charge', 'ch_1', 0)).toBe(true);

    const reported: string[] = [];
    let removed = 0;
    for (let more = true; more;) {
      const result = await collector.collect(100, (key) => {
        if (key.scope === scope) {
          reported.push(key.key);
        }
      });
      removed += result.removed;
      more = result.more;
    }
    expect(interleaved).toBe(true);
    // Handed over (at least once), but the retry keeps its record and steps.
    expect(reported).toEqual(['abandoned']);
    expect(await itemOf(scope, 'abandoned')).toMatchObject({
      owner: { S: retry.owner },
      steps: { M: { charge: expect.any(Object) } },
    });
    expect(removed).toBe(0);
  });

  it('reports the expired steps of an abandoned key once when two instances collect at once', async () => {
    const scope = `twice-${randomUUID()}`;
    const abandoned = { ...attempt('abandoned', scope), leaseMs: 0, ttlMs: 0 };
    await store.claim(abandoned);
    expect(await store.saveStep(abandoned, 'charge', 'ch_2', 0)).toBe(true);
    const reported: string[] = [];
    const report = (key: AbandonedKey) => {
      if (key.scope === scope) {
        reported.push(`${key.key}: ${JSON.stringify(key.steps)}`);
      }
    };
    /** Collects the whole table, from its start. */
    const collectAll = async (collector: DynamoDbIdempotencyStore) => {
      for (let more = true; more;) {
        more = (await collector.collect(100, report)).more;
      }
    };
    // One instance's Scan has read the key when the other collects it all.
    const first = dynamo.client();
    let interleaved = false;
    first.middlewareStack.add(
      (next, context) => async (args) => {
        const output = await next(args);
        if (context.commandName === 'ScanCommand' && !interleaved) {
          interleaved = true;
          await collectAll(new DynamoDbIdempotencyStore(client, { tableName }));
        }
        return output;
      },
      { step: 'initialize', name: 'collectAfterScan' },
    );
    await collectAll(new DynamoDbIdempotencyStore(first, { tableName }));
    expect(interleaved).toBe(true);
    expect(reported).toEqual([
      `abandoned: ${JSON.stringify([{ step: 'charge', result: 'ch_2' }])}`,
    ]);
  });

  it('scans the whole table across collections, a page per call, deleting at most a batch per call', async () => {
    const paged = new DynamoDbIdempotencyStore(client, {
      tableName,
      scanPageSize: 2,
    });
    const scope = `paged-${randomUUID()}`;
    for (const key of ['a', 'b', 'c', 'd', 'e']) {
      const claim = attempt(key, scope);
      await paged.claim(claim);
      await paged.complete(claim, { ...completion, ttlMs: 0 }, undefined);
    }
    let calls = 0;
    let result = { removed: 0, more: true };
    let removed = 0;
    const batches: number[] = [];
    while (result.more && calls < 1_000) {
      result = await paged.collect(1, () => undefined);
      batches.push(result.removed);
      removed += result.removed;
      calls += 1;
    }
    expect(Math.max(...batches)).toBe(1);
    expect(calls).toBeGreaterThan(1);
    expect(removed).toBeGreaterThanOrEqual(5);
    const { Items: left } = await client.send(
      new ScanCommand({
        TableName: tableName,
        ConsistentRead: true,
        FilterExpression: '#scope = :scope',
        ExpressionAttributeNames: { '#scope': 'scope' },
        ExpressionAttributeValues: { ':scope': { S: scope } },
      }),
    );
    expect(left).toEqual([]);
  });

  it('counts failed attempts in an item of their own beside the record, with the expiry DynamoDB and the collection delete it by', async () => {
    const count = (key: string, ttlMs: number) =>
      store.countFailure({ scope: 'failures', key }, ttlMs);
    const failures = async (key: string) =>
      (
        await client.send(
          new GetItemCommand({
            TableName: tableName,
            Key: { pk: { S: `${partitionKey('failures', key)}#failures` } },
            ConsistentRead: true,
          }),
        )
      ).Item;
    const claim = attempt('poison', 'failures');
    await store.claim(claim);
    await store.release(claim);
    expect(await count('poison', HOUR_MS)).toBe(1);
    expect(await count('poison', HOUR_MS)).toBe(2);
    // The release deleted the record; the count stays beside it.
    expect(await itemOf('failures', 'poison')).toBeUndefined();
    const item = await failures('poison');
    expect(item).toMatchObject({
      scope: { S: 'failures' },
      key: { S: 'poison' },
      status: { S: 'counted' },
      failures: { N: '2' },
    });
    const expiresAt = Number(item!.expires_at.N);
    expect(Number(item!.ttl.N)).toBe(Math.ceil(expiresAt / 1000));

    await count('expired', 0);
    let result = { removed: 0, more: true };
    for (let calls = 0; result.more && calls < 1_000; calls += 1) {
      result = await store.collect(1_000, () => undefined);
    }
    expect(await failures('expired')).toBeUndefined();
    expect(await failures('poison')).toMatchObject({ failures: { N: '2' } });
  });
});
