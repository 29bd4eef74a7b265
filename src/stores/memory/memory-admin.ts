import type {
  ForgottenBatch,
  RecordInspection,
  RecordPage,
  RecordQuery,
  RecordState,
  RecordSummary,
  ResetOutcome,
  StoredResponse,
} from '../../interfaces/idempotency-store.interface.js';
import { decodeCursor, encodeCursor } from '../record-cursor.js';

/** What the operations below read and change of a memory record. */
export interface MemoryAdminRecord {
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
  status: RecordState;
  owner: string | undefined;
  bound: boolean;
  readonly generation: string;
  readonly createdAt: number;
  completedAt: number | undefined;
  leaseExpiresAt: number | undefined;
  expiresAt: number;
  response: StoredResponse | undefined;
  responseStatus: number | undefined;
}

/** The memory store's maps, keyed by `JSON.stringify([scope, key])`. */
export interface MemoryAdminMaps {
  readonly records: Map<string, MemoryAdminRecord>;
  readonly steps: Map<string, Map<string, { readonly expiresAt: number }>>;
  /** The counts of failed attempts (`countFailure`). */
  readonly failures: Map<string, unknown>;
}

const dateOf = (ms: number | undefined) =>
  ms === undefined ? undefined : new Date(ms);

function summaryOf(id: string, record: MemoryAdminRecord): RecordSummary {
  const [scope, key] = JSON.parse(id) as [string, string];
  return {
    scope,
    key,
    status: record.status,
    fingerprint: record.fingerprint,
    method: record.method,
    path: record.path,
    owner: record.status === 'in_progress' ? record.owner : undefined,
    leaseExpiresAt:
      record.status === 'in_progress'
        ? dateOf(record.leaseExpiresAt)
        : undefined,
    generation: record.generation,
    bound: record.status === 'in_progress' && record.bound,
    createdAt: dateOf(record.createdAt),
    completedAt: dateOf(record.completedAt),
    expiresAt: new Date(record.expiresAt),
  };
}

/** @internal `IdempotencyStore.inspectRecord` of the memory store. */
export function inspectMemoryRecord(
  maps: MemoryAdminMaps,
  id: string,
  withBody: boolean,
): RecordInspection | undefined {
  const record = maps.records.get(id);
  if (!record) {
    return undefined;
  }
  const { response, responseStatus } = record;
  return {
    ...summaryOf(id, record),
    response:
      responseStatus === undefined
        ? undefined
        : {
            status: responseStatus,
            headers: structuredClone(response?.headers ?? {}),
            ...(withBody
              ? { body: Buffer.from(response?.body ?? Buffer.alloc(0)) }
              : {}),
          },
    steps: [...(maps.steps.get(id) ?? [])].map(([step, stored]) => ({
      step,
      expiresAt: new Date(stored.expiresAt),
    })),
  };
}

/** @internal `IdempotencyStore.listRecords` of the memory store, in id order. */
export function listMemoryRecords(
  maps: MemoryAdminMaps,
  query: RecordQuery,
): RecordPage {
  const after =
    query.cursor === undefined ? undefined : decodeCursor(query.cursor, 1)[0];
  const ids = [...maps.records]
    .filter(([id, record]) => {
      return (
        (after === undefined || id > after) &&
        query.statuses.includes(record.status) &&
        (query.scope === undefined ||
          (JSON.parse(id) as string[])[0] === query.scope) &&
        (query.olderThan === undefined ||
          record.createdAt < query.olderThan.getTime())
      );
    })
    .map(([id]) => id)
    .sort()
    .slice(0, query.limit);
  return {
    records: ids.map((id) => summaryOf(id, maps.records.get(id)!)),
    cursor:
      ids.length === query.limit ? encodeCursor([ids.at(-1)!]) : undefined,
  };
}

/** @internal `IdempotencyStore.resetRecord` of the memory store. */
export function resetMemoryRecord(
  maps: MemoryAdminMaps,
  id: string,
  force: boolean,
): ResetOutcome {
  const record = maps.records.get(id);
  if (!record) {
    return { state: 'absent' };
  }
  const claimed = record.status === 'in_progress' && record.owner !== undefined;
  const leaseMs = Math.max(0, (record.leaseExpiresAt ?? 0) - Date.now());
  if (claimed && leaseMs > 0 && !force) {
    return { state: 'held', owner: record.owner, leaseMs };
  }
  // A bound claim, or one held (its attempt may have derived keys from its
  // generation), keeps its generation, as a takeover does.
  if (record.status === 'in_progress' && (record.bound || claimed)) {
    // As a takeover finds a released bound claim: no owner, lease ended.
    record.owner = undefined;
    record.leaseExpiresAt = Date.now();
  } else {
    maps.records.delete(id);
    maps.steps.delete(id);
  }
  return { state: 'reset', fenced: claimed };
}

/**
 * @internal One batch of `IdempotencyStore.forgetRecords` of the memory
 * store: records, then steps, then (with the last batch) the counts of
 * failures of the keys it forgets.
 */
export function forgetMemoryRecords(
  maps: MemoryAdminMaps,
  matches: (id: string) => boolean,
  batchSize: number,
): ForgottenBatch {
  let records = 0;
  let steps = 0;
  for (const id of maps.records.keys()) {
    if (records === batchSize) {
      return { records, steps, more: true };
    }
    if (matches(id)) {
      maps.records.delete(id);
      records += 1;
    }
  }
  for (const [id, stored] of maps.steps) {
    if (!matches(id)) {
      continue;
    }
    if (records + steps > 0 && records + steps + stored.size > batchSize) {
      return { records, steps, more: true };
    }
    maps.steps.delete(id);
    steps += stored.size;
  }
  for (const id of maps.failures.keys()) {
    if (matches(id)) {
      maps.failures.delete(id);
    }
  }
  return { records, steps, more: false };
}

/** @internal `IdempotencyStore.replaceResponse` of the memory store. */
export function replaceMemoryResponse(
  maps: MemoryAdminMaps,
  id: string,
  expected: Buffer,
  response: StoredResponse,
  generation?: string,
): boolean {
  const record = maps.records.get(id);
  if (
    !record?.response ||
    (record.status !== 'completed' && record.status !== 'failed') ||
    !record.response.body.equals(expected) ||
    (generation !== undefined && record.generation !== generation)
  ) {
    return false;
  }
  record.response = {
    status: record.response.status,
    headers: structuredClone(response.headers),
    body: Buffer.from(response.body),
  };
  return true;
}
