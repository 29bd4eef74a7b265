import type {
  IdempotencyStore,
  RecordInspection,
  RecordPage,
} from '../interfaces/idempotency-store.interface.js';
import {
  sealedKeyId,
  UnreadableRecordError,
} from '../privacy/idempotency-key-ring.js';
import type { IdempotencyPrivacy } from '../privacy/idempotency-privacy.service.js';

/**
 * A stored response as {@link IdempotencyAdmin.inspect} shows it: what a
 * duplicate would get. A sealed one (`encryption`) is opened with the key
 * ring; one that cannot be opened has `unreadable` and neither headers nor
 * body (never the sealed bytes).
 */
export interface IdempotencyResponseView {
  readonly status: number;
  /** Its headers; absent when it is sealed and cannot be opened. */
  readonly headers?: Record<string, string | string[]>;
  /** Its body, when asked for and readable. */
  readonly body?: Buffer;
  /**
   * The id of the key it is sealed with; absent when it is not sealed (not
   * a well-formed sealed value, even if its body begins with `IDS1`).
   */
  readonly keyId?: string;
  /**
   * Why it cannot be opened: no key ring given, its key not in the ring, or
   * altered. A duplicate of its key gets 503 from a module that cannot open it.
   */
  readonly unreadable?: string;
}

/** What {@link IdempotencyAdmin.reencrypt} reseals and how. */
export interface IdempotencyReencryptOptions {
  /** Only this scope. @default every scope */
  readonly scope?: string;
  /** Records read per page, 1 to 1000. @default 100 */
  readonly batchSize?: number;
  /** Called after each page, with the counts so far. */
  readonly onBatch?: (progress: IdempotencyReencryptResult) => void;
}

/** What {@link IdempotencyAdmin.reencrypt} did, record by record. */
export interface IdempotencyReencryptResult {
  /** Sealed again with the current key (or sealed for the first time). */
  readonly resealed: number;
  /** Already sealed with the current key: left as they were. */
  readonly current: number;
  /** Changed, reset or gone between their read and their write: left alone. */
  readonly changed: number;
  /** Those that cannot be opened (key not in the ring, altered), and why. */
  readonly unreadable: ReadonlyArray<{
    readonly scope: string;
    readonly key: string;
    /** The step whose result it is; absent for a record's response. */
    readonly step?: string;
    readonly reason: string;
  }>;
  /**
   * The stored results of the steps of claims in progress (a request that
   * failed after a step keeps its key bound to them until they expire), as
   * the records' responses: resealed, already current, changed meanwhile.
   * All 0 on a store that cannot reseal steps.
   */
  readonly steps: {
    readonly resealed: number;
    readonly current: number;
    readonly changed: number;
  };
}

/**
 * @internal A stored response as a duplicate would get it, opened with
 * `privacy`'s key ring when it is sealed, or why it cannot be read.
 */
export function openedResponse(
  privacy: IdempotencyPrivacy | undefined,
  scope: string,
  key: string,
  stored: NonNullable<RecordInspection['response']>,
  withBody: boolean,
): IdempotencyResponseView {
  const body = stored.body ?? Buffer.alloc(0);
  const keyId = sealedKeyId(body);
  if (!privacy?.encrypted) {
    return keyId === undefined
      ? {
          status: stored.status,
          headers: stored.headers,
          ...(withBody ? { body } : {}),
        }
      : {
          status: stored.status,
          keyId,
          unreadable: `it is sealed with key "${keyId}", and no key ring was given to open it`,
        };
  }
  // With a key ring, as a duplicate reads it: a response stored before
  // `encryption` was turned on is read only with `readPlaintext`.
  const sealed = keyId === undefined ? {} : { keyId };
  try {
    const response = privacy.open(scope, key, { ...stored, body });
    return {
      status: response.status,
      headers: response.headers,
      ...(withBody ? { body: response.body } : {}),
      ...sealed,
    };
  } catch (error) {
    if (!(error instanceof UnreadableRecordError)) {
      throw error;
    }
    return { status: stored.status, ...sealed, unreadable: error.message };
  }
}

/** @internal What {@link reencryptRecords} reads and writes the records with. */
export interface SealedRecords {
  /** A page of finished records, from `cursor`. */
  page(cursor: string | undefined): Promise<RecordPage>;
  inspect: NonNullable<IdempotencyStore['inspectRecord']>;
  replace: NonNullable<IdempotencyStore['replaceResponse']>;
  /** A page of claims in progress, from `cursor`, whose steps are resealed. */
  claims(cursor: string | undefined): Promise<RecordPage>;
  /** The store's step operations; absent: no step is resealed. */
  readSteps?: NonNullable<IdempotencyStore['readStepResults']>;
  replaceStep?: NonNullable<IdempotencyStore['replaceStepResult']>;
}

/**
 * @internal `IdempotencyAdmin.reencrypt`: each finished record read, its
 * response resealed with the current key and written back if unchanged;
 * then each claim in progress, the results of its steps likewise.
 */
export async function reencryptRecords(
  privacy: IdempotencyPrivacy,
  records: SealedRecords,
  onBatch: IdempotencyReencryptOptions['onBatch'],
): Promise<IdempotencyReencryptResult> {
  let resealed = 0;
  let current = 0;
  let changed = 0;
  const unreadable: Array<IdempotencyReencryptResult['unreadable'][number]> =
    [];
  const steps = { resealed: 0, current: 0, changed: 0 };
  let cursor: string | undefined;
  do {
    const page = await records.page(cursor);
    for (const { scope, key } of page.records) {
      const record = await records.inspect(scope, key, true);
      const body = record?.response?.body;
      if (!record?.response || !body) {
        // Gone since the page was read, or a response without a body.
        changed += record ? 0 : 1;
        continue;
      }
      const read = { ...record.response, body };
      let next;
      try {
        next = privacy.reencrypt(scope, key, read);
      } catch (error) {
        if (!(error instanceof UnreadableRecordError)) {
          throw error;
        }
        unreadable.push({ scope, key, reason: error.message });
        continue;
      }
      if (next === undefined) {
        current += 1;
      } else if (
        await records.replace(scope, key, body, next, record.generation)
      ) {
        resealed += 1;
      } else {
        changed += 1;
      }
    }
    onBatch?.({ resealed, current, changed, unreadable, steps });
    cursor = page.cursor;
  } while (cursor !== undefined);
  const { readSteps, replaceStep } = records;
  if (readSteps && replaceStep) {
    do {
      const page = await records.claims(cursor);
      for (const { scope, key } of page.records) {
        for (const { step, result } of await readSteps(scope, key)) {
          let next;
          try {
            next = privacy.reencryptStep(scope, key, step, result);
          } catch (error) {
            if (!(error instanceof UnreadableRecordError)) {
              throw error;
            }
            unreadable.push({ scope, key, step, reason: error.message });
            continue;
          }
          if (next === undefined) {
            steps.current += 1;
          } else if (await replaceStep(scope, key, step, result, next)) {
            steps.resealed += 1;
          } else {
            steps.changed += 1;
          }
        }
      }
      onBatch?.({ resealed, current, changed, unreadable, steps });
      cursor = page.cursor;
    } while (cursor !== undefined);
  }
  return { resealed, current, changed, unreadable, steps };
}
