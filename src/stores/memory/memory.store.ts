import { randomUUID } from 'node:crypto';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import type {
  AbandonedKey,
  ClaimOutcome,
  ClaimRequest,
  Completion,
  FailureKey,
  FencedWrite,
  IdempotencyStore,
  Lease,
  RecordStatus,
  Renewal,
  StepLease,
  StoredResponse,
  ForgottenBatch,
  RecordInspection,
  RecordPage,
  RecordQuery,
  ResetOutcome,
} from '../../interfaces/idempotency-store.interface.js';
import {
  forgetMemoryRecords,
  inspectMemoryRecord,
  listMemoryRecords,
  replaceMemoryResponse,
  resetMemoryRecord,
  type MemoryAdminRecord,
} from './memory-admin.js';

/** Options of the {@link MemoryIdempotencyStore}. */
export interface MemoryIdempotencyStoreOptions {
  /**
   * Lets the store start when `NODE_ENV` is `'production'`. An in-memory
   * store keeps nothing across restarts and sees nothing of other
   * instances: duplicates on another instance, or after a restart, run
   * again. Set it only for a single instance that accepts that.
   * @default false
   */
  readonly allowInProduction?: boolean;
}

interface MemoryRecord extends MemoryAdminRecord {
  readonly fingerprint: string;
  status: RecordStatus | 'in_progress';
  /** `undefined` once released bound to its request. */
  owner: string | undefined;
  /**
   * Whether the key is bound to the request of `fingerprint` (a step began,
   * or the attempt derived keys), until the record expires.
   */
  bound: boolean;
  /** The key's generation (see `ClaimOutcome`). */
  readonly generation: string;
  /** Epoch ms; `undefined` once finished. */
  leaseExpiresAt: number | undefined;
  /** Epoch ms after which the record may be taken over or collected. */
  expiresAt: number;
  waiting: boolean;
  response: StoredResponse | undefined;
  responseStatus: number | undefined;
}

interface MemoryStep {
  /** The result as JSON, as a database would keep it: a copy, never shared. */
  readonly json: string;
  /** Fingerprint of the request that saved it: the key is bound to it. */
  readonly fingerprint: string;
  /** The generation of the claim that saved it: read back in it only. */
  readonly generation: string;
  /** Epoch ms after which the collector may take it, once its generation ended. */
  readonly expiresAt: number;
}

const NOTHING_WRITTEN: FencedWrite = { fenced: false, waiting: false };

/** One key of a (scope, key) pair, whatever characters either holds. */
function idOf(scope: string, key: string): string {
  return JSON.stringify([scope, key]);
}

function copyResponse(response: StoredResponse): StoredResponse {
  return {
    status: response.status,
    headers: JSON.parse(JSON.stringify(response.headers)) as Record<
      string,
      string | string[]
    >,
    body: Buffer.from(response.body),
  };
}

/**
 * The claim protocol in the memory of one process: for development, and for
 * the tests of applications (see `IdempotencyTestingModule`). It keeps the
 * semantics of the other stores (leases and their takeover, the owner's
 * fence on every write, expiry, recovery points, waiters woken at once) but
 * nothing survives a restart and no other process sees its records.
 *
 * Like every store but PostgreSQL's, it completes right after the handler,
 * not in a transaction of the handler: the module then opens no database
 * transaction, and needs neither TypeORM nor pg.
 *
 * @throws IdempotencyConfigurationError when constructed with `NODE_ENV`
 * set to `'production'`, unless `allowInProduction` is set.
 * @example
 * IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })
 */
export class MemoryIdempotencyStore implements IdempotencyStore<unknown> {
  /** Completes after the handler, outside of any database transaction. */
  readonly completesInTransaction = false;
  /** Completions reach every module sharing this store at once. */
  readonly watching = true;
  private readonly records = new Map<string, MemoryRecord>();
  private readonly steps = new Map<string, Map<string, MemoryStep>>();
  /** Failed attempts of keys, and when each count expires (epoch ms). */
  private readonly failures = new Map<
    string,
    { count: number; expiresAt: number }
  >();
  private readonly watchers: Array<(scope?: string, key?: string) => void> = [];
  private readonly maps = {
    records: this.records,
    steps: this.steps,
    failures: this.failures,
  };

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    if (process.env.NODE_ENV === 'production' && !options.allowInProduction) {
      throw new IdempotencyConfigurationError(
        'MemoryIdempotencyStore keeps its records in the memory of one process, and NODE_ENV is "production".',
        'Use a store shared by every instance and kept across restarts (the default PostgreSQL store, or the Redis or DynamoDB one).',
        'Pass `new MemoryIdempotencyStore({ allowInProduction: true })` for a single instance whose duplicates may run again after a restart.',
      );
    }
  }

  /** How many records it holds (finished, in progress or expired). */
  get size(): number {
    return this.records.size;
  }

  /** Forgets every record and step: between the tests of an application. */
  clear(): void {
    this.records.clear();
    this.steps.clear();
    this.failures.clear();
  }

  async claim(request: ClaimRequest): Promise<ClaimOutcome> {
    const now = Date.now();
    const id = idOf(request.scope, request.key);
    const record = this.records.get(id);
    // A claim that has not expired: a takeover keeps its generation, and
    // its binding to its request.
    const live =
      record?.status === 'in_progress' && record.expiresAt > now
        ? record
        : undefined;
    // A bound claim (a step began or committed, or its attempt derived
    // keys) keeps the key for its request until it expires, whatever
    // became of its owner: its record outlives its steps.
    if (live?.bound && live.fingerprint !== request.fingerprint) {
      if (!record || this.takeable(record, now)) {
        return {
          state: 'in_progress',
          fingerprint: live.fingerprint,
          leaseMs: 0,
        };
      }
    } else if (!record || this.takeable(record, now)) {
      const generation = live?.generation ?? randomUUID();
      this.records.set(id, {
        fingerprint: request.fingerprint,
        method: request.method,
        path: request.path,
        status: 'in_progress',
        owner: request.owner,
        createdAt: live?.createdAt ?? now,
        completedAt: undefined,
        bound: live?.bound ?? false,
        generation,
        leaseExpiresAt: now + request.leaseMs,
        expiresAt: Math.max(
          now + Math.max(request.ttlMs, request.leaseMs),
          live?.bound ? live.expiresAt : 0,
        ),
        waiting: false,
        response: undefined,
        responseStatus: undefined,
      });
      return { state: 'claimed', generation };
    }
    if (record.status !== 'in_progress') {
      return {
        state: 'finished',
        record: {
          status: record.status,
          fingerprint: record.fingerprint,
          response: record.response
            ? copyResponse(record.response)
            : {
                status: record.responseStatus ?? 0,
                headers: {},
                body: Buffer.alloc(0),
              },
        },
      };
    }
    if (request.wait && record.fingerprint === request.fingerprint) {
      record.waiting = true;
    }
    return {
      state: 'in_progress',
      fingerprint: record.fingerprint,
      leaseMs: Math.max(0, (record.leaseExpiresAt ?? now) - now),
    };
  }

  async renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>> {
    const now = Date.now();
    const held = new Set<string>();
    for (const lease of leases) {
      const record = this.owned(lease);
      if (record) {
        record.leaseExpiresAt = now + lease.durationMs;
        held.add(lease.owner);
      }
    }
    return held;
  }

  async complete(
    lease: Lease,
    completion: Completion,
    _transaction?: unknown,
  ): Promise<FencedWrite> {
    const record = this.owned(lease);
    if (!record) {
      return NOTHING_WRITTEN;
    }
    const { response } = completion;
    record.status = completion.status;
    record.response = 'body' in response ? copyResponse(response) : undefined;
    record.responseStatus = response.status;
    record.leaseExpiresAt = undefined;
    record.completedAt = Date.now();
    record.expiresAt = Date.now() + completion.ttlMs;
    this.steps.delete(idOf(lease.scope, lease.key));
    return { fenced: true, waiting: record.waiting };
  }

  async release(lease: Lease, bind = false): Promise<FencedWrite> {
    const record = this.owned(lease);
    if (!record) {
      return NOTHING_WRITTEN;
    }
    if (bind || record.bound) {
      record.bound = true;
      record.owner = undefined;
      record.leaseExpiresAt = Date.now();
    } else {
      this.records.delete(idOf(lease.scope, lease.key));
    }
    return { fenced: true, waiting: record.waiting };
  }

  async bind(lease: StepLease, holdMs = 0): Promise<boolean> {
    const record = this.owned(lease);
    if (record) {
      record.bound = true;
      record.expiresAt = Math.max(record.expiresAt, Date.now() + holdMs);
    }
    return record !== undefined;
  }

  async notify(leases: readonly Lease[]): Promise<void> {
    for (const lease of leases) {
      for (const watcher of this.watchers) {
        watcher(lease.scope, lease.key);
      }
    }
  }

  watch(listener: (scope?: string, key?: string) => void): void {
    this.watchers.push(listener);
  }

  async readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ readonly result: unknown } | undefined> {
    const id = idOf(lease.scope, lease.key);
    const stored = this.steps.get(id)?.get(step);
    // A step of the reader's generation, however old (its own expiry is
    // the collector's): never one of an earlier generation of the key.
    return stored &&
      stored.generation === this.owned(lease)?.generation &&
      stored.fingerprint === lease.fingerprint
      ? { result: JSON.parse(stored.json) as unknown }
      : undefined;
  }

  async saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    const record = this.owned(lease);
    if (!record) {
      return false;
    }
    record.bound = true;
    record.expiresAt = Math.max(record.expiresAt, Date.now() + ttlMs);
    // Serialised first: a result JSON cannot hold fails before any write.
    const json = JSON.stringify(result ?? null);
    const id = idOf(lease.scope, lease.key);
    let steps = this.steps.get(id);
    if (!steps) {
      steps = new Map();
      this.steps.set(id, steps);
    }
    steps.set(step, {
      json,
      fingerprint: lease.fingerprint,
      generation: record.generation,
      expiresAt: Date.now() + ttlMs,
    });
    return true;
  }

  /** Counts apart from the record, which a release deletes. */
  async countFailure(key: FailureKey, ttlMs: number): Promise<number> {
    const now = Date.now();
    const id = idOf(key.scope, key.key);
    const previous = this.failures.get(id);
    const count = previous && previous.expiresAt > now ? previous.count + 1 : 1;
    this.failures.set(id, { count, expiresAt: now + ttlMs });
    return count;
  }

  /** Deletes the key's count. */
  async forgetFailures(key: FailureKey): Promise<void> {
    this.failures.delete(idOf(key.scope, key.key));
  }

  async collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ readonly removed: number; readonly more: boolean }> {
    const now = Date.now();
    let removed = 0;
    for (const [id, failures] of this.failures) {
      if (removed >= batchSize) {
        return { removed, more: true };
      }
      if (failures.expiresAt <= now) {
        this.failures.delete(id);
        removed += 1;
      }
    }
    for (const [id, record] of this.records) {
      if (removed >= batchSize) {
        return { removed, more: true };
      }
      if (
        record.expiresAt <= now &&
        (record.status !== 'in_progress' ||
          (record.leaseExpiresAt ?? now) <= now)
      ) {
        this.records.delete(id);
        removed += 1;
      }
    }
    if (removed >= batchSize) {
      return { removed, more: true };
    }
    // Expired steps are those of requests that never completed. Every key
    // is reported before anything of it is deleted: a report that throws
    // leaves them all for the next collection.
    const due: Array<{ id: string; key: AbandonedKey; names: string[] }> = [];
    let rows = 0;
    for (const [id, steps] of this.steps) {
      if (rows >= batchSize - removed) {
        break;
      }
      // Kept while the claim of their generation is in progress.
      const record = this.records.get(id);
      const live =
        record?.status === 'in_progress' ? record.generation : undefined;
      const names = [...steps]
        .filter(([, step]) => step.expiresAt <= now && step.generation !== live)
        .map(([name]) => name);
      if (names.length > 0) {
        const [scope, key] = JSON.parse(id) as [string, string];
        due.push({
          id,
          names,
          key: {
            scope,
            key,
            steps: names.map((name) => ({
              step: name,
              result: JSON.parse(steps.get(name)!.json) as unknown,
            })),
          },
        });
        rows += names.length;
      }
    }
    for (const { key } of due) {
      abandoned(key);
    }
    for (const { id, names } of due) {
      const steps = this.steps.get(id)!;
      for (const name of names) {
        steps.delete(name);
      }
      if (steps.size === 0) {
        this.steps.delete(id);
      }
    }
    removed += rows;
    return { removed, more: removed >= batchSize };
  }

  async inspectRecord(
    scope: string,
    key: string,
    withBody: boolean,
  ): Promise<RecordInspection | undefined> {
    return inspectMemoryRecord(this.maps, idOf(scope, key), withBody);
  }

  async listRecords(query: RecordQuery): Promise<RecordPage> {
    return listMemoryRecords(this.maps, query);
  }

  async resetRecord(
    scope: string,
    key: string,
    force: boolean,
  ): Promise<ResetOutcome> {
    return resetMemoryRecord(this.maps, idOf(scope, key), force);
  }

  async forgetRecords(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch> {
    // An id is the JSON of [scope, key]: those of the scope share its start.
    const prefix = `${JSON.stringify([scope]).slice(0, -1)},`;
    const one = key === undefined ? undefined : idOf(scope, key);
    return forgetMemoryRecords(
      this.maps,
      (id) => (one === undefined ? id.startsWith(prefix) : id === one),
      batchSize,
    );
  }

  async replaceResponse(
    scope: string,
    key: string,
    expected: Buffer,
    response: StoredResponse,
    generation?: string,
  ): Promise<boolean> {
    return replaceMemoryResponse(
      this.maps,
      idOf(scope, key),
      expected,
      response,
      generation,
    );
  }

  async readStepResults(
    scope: string,
    key: string,
  ): Promise<Array<{ step: string; result: unknown }>> {
    const steps =
      this.steps.get(idOf(scope, key)) ?? new Map<string, MemoryStep>();
    return [...steps]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([step, { json }]) => ({
        step,
        result: JSON.parse(json) as unknown,
      }));
  }

  async replaceStepResult(
    scope: string,
    key: string,
    step: string,
    expected: unknown,
    result: unknown,
  ): Promise<boolean> {
    const steps = this.steps.get(idOf(scope, key));
    const stored = steps?.get(step);
    if (!stored || stored.json !== JSON.stringify(expected ?? null)) {
      return false;
    }
    steps!.set(step, { ...stored, json: JSON.stringify(result ?? null) });
    return true;
  }

  /** Whether a claim may take the record over: expired, or its lease is. */
  private takeable(record: MemoryRecord, now: number): boolean {
    return record.status === 'in_progress'
      ? (record.leaseExpiresAt ?? now) <= now
      : record.expiresAt <= now;
  }

  /** The record, while `lease` owns its claim. */
  private owned(lease: Lease): MemoryRecord | undefined {
    const record = this.records.get(idOf(lease.scope, lease.key));
    return record?.status === 'in_progress' && record.owner === lease.owner
      ? record
      : undefined;
  }
}
