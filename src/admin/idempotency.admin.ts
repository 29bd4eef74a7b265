import { Inject, Injectable, Optional } from '@nestjs/common';
import { DEFAULT_SCOPE } from '../idempotency.constants.js';
import {
  IdempotencyAdminInputError,
  IdempotencyAdminUnsupportedError,
  IdempotencyLeaseHeldError,
  IdempotencyRecordNotFoundError,
} from '../exceptions/idempotency-admin.errors.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import {
  IdempotencyStore,
  type RecordInspection,
  type RecordPage,
  type RecordState,
} from '../interfaces/idempotency-store.interface.js';
import { IdempotencyPrivacy } from '../privacy/idempotency-privacy.service.js';
import {
  openedResponse,
  reencryptRecords,
  type IdempotencyReencryptOptions,
  type IdempotencyReencryptResult,
  type IdempotencyResponseView,
} from './sealed-records.js';

/** The states a record can be listed in. */
const STATES: readonly RecordState[] = [
  'in_progress',
  'completed',
  'failed',
  'not_replayable',
];

/** A record as {@link IdempotencyAdmin.inspect} shows it. */
export interface IdempotencyRecordView extends Omit<
  RecordInspection,
  'response'
> {
  /** How long the owner's lease runs unless renewed (ms); 0 once it ran out. */
  readonly leaseMs?: number;
  /** The stored response, opened when it is sealed (`encryption`). */
  readonly response?: IdempotencyResponseView;
}

/** What {@link IdempotencyAdmin.list} looks for. */
export interface IdempotencyListQuery {
  /**
   * The states listed: in-progress claims (stuck work) and stored errors.
   * @default ['in_progress', 'failed']
   */
  readonly status?: RecordState | readonly RecordState[];
  /** Only this scope. @default every scope */
  readonly scope?: string;
  /**
   * Only records created before this instant (one before the year 1 or
   * after 9999 counts as that year's bound: no store keeps a record outside
   * them). @default any age
   */
  readonly olderThan?: Date;
  /** Records per page, 1 to 1000. @default 100 */
  readonly limit?: number;
  /** The `cursor` of the previous page, for the next one. */
  readonly cursor?: string;
}

/** What {@link IdempotencyAdmin.forget} deletes and how. */
export interface IdempotencyForgetOptions {
  /** Only this key of the scope. @default every key of the scope */
  readonly key?: string;
  /**
   * Rows deleted per batch, each batch a write of its own: no lock is held
   * longer than one batch. 1 to 10000. @default 1000
   */
  readonly batchSize?: number;
  /** Called after each batch, with the counts so far. */
  readonly onBatch?: (forgotten: IdempotencyForgetResult) => void;
}

/** What {@link IdempotencyAdmin.forget} deleted. */
export interface IdempotencyForgetResult {
  readonly records: number;
  readonly steps: number;
}

type AdminOperation =
  | 'inspectRecord'
  | 'listRecords'
  | 'resetRecord'
  | 'forgetRecords'
  | 'replaceResponse';

/**
 * The operator's view of the idempotency records, on every built-in store
 * (and a custom one that implements the store's optional operations): look
 * a key up, list stuck claims and stored errors, reset a key so its next
 * request runs, forget a scope or a key (a data-protection request). The
 * command line (`npx nestjs-idempotency`) runs the same service.
 *
 * @throws IdempotencyAdminError (and its subclasses) for bad input, a key
 * without a record, a live lease, or a store without the operation.
 * @example
 * const admin = app.get(IdempotencyAdmin);
 * const record = await admin.inspect('8e03978e-…', 'global');
 * await admin.reset('8e03978e-…', 'global', { force: true });
 */
@Injectable()
export class IdempotencyAdmin {
  /**
   * @param privacy the key ring responses are opened with (the module's, or
   * `IdempotencyPrivacy.withKeys()`); without it a sealed response is shown
   * as unreadable.
   */
  constructor(
    @Inject(IdempotencyStore) private readonly store: IdempotencyStore,
    @Optional() private readonly privacy?: IdempotencyPrivacy,
  ) {}

  /**
   * A record: its state, owner and lease left, generation, times,
   * fingerprint, stored response (its body when `body` is set; opened with
   * the key ring under `encryption`) and steps (their results not read).
   * @param scope @default 'global' (the scope without a `scope` resolver)
   * @throws IdempotencyRecordNotFoundError when the key has no record.
   */
  async inspect(
    key: string,
    scope: string = DEFAULT_SCOPE,
    options: { readonly body?: boolean } = {},
  ): Promise<IdempotencyRecordView> {
    checkName('key', key);
    checkName('scope', scope);
    // The body is read in any case: a sealed one holds the headers too.
    const record = await this.operation('inspectRecord')(scope, key, true);
    if (!record) {
      throw new IdempotencyRecordNotFoundError(scope, key);
    }
    const view: IdempotencyRecordView = {
      ...record,
      response:
        record.response &&
        openedResponse(
          // Not replayable: its status alone was stored, never sealed, and
          // its duplicates get it (with no body), not a 503.
          record.status === 'not_replayable' ? undefined : this.privacy,
          scope,
          key,
          record.response,
          options.body ?? false,
        ),
    };
    return record.leaseExpiresAt
      ? {
          ...view,
          leaseMs: Math.max(0, record.leaseExpiresAt.getTime() - Date.now()),
        }
      : view;
  }

  /**
   * A page of records in the query's states, in the store's order
   * (PostgreSQL: by scope, then key; Redis: its SCAN order, node by node),
   * not by age; the page's cursor gives the next.
   */
  async list(query: IdempotencyListQuery = {}): Promise<RecordPage> {
    const statuses =
      query.status === undefined
        ? (['in_progress', 'failed'] as const)
        : typeof query.status === 'string'
          ? [query.status]
          : query.status;
    for (const status of statuses) {
      if (!STATES.includes(status)) {
        throw new IdempotencyAdminInputError(
          `Status "${String(status)}" is none of ${STATES.join(', ')}.`,
        );
      }
    }
    const limit = query.limit ?? 100;
    checkCount('limit', limit, 1000);
    if (query.scope !== undefined) {
      checkName('scope', query.scope);
    }
    if (query.olderThan && Number.isNaN(query.olderThan.getTime())) {
      throw new IdempotencyAdminInputError('`olderThan` is an invalid date.');
    }
    return this.operation('listRecords')({
      statuses,
      scope: query.scope,
      olderThan: query.olderThan && withinStores(query.olderThan),
      limit,
      cursor: query.cursor,
    });
  }

  /**
   * Ends a record so that the next request of its key runs. A finished
   * record is deleted with its steps. A claim whose owner's lease is live is
   * refused unless `force`; forced, or with its lease run out, it is taken
   * from its owner as a takeover takes it: the owner's completion is fenced
   * out (its request gets 503, its writes roll back), and a key bound to its
   * request by a step stays so, the same request resuming after its last
   * step (forget the key to drop that too). The key's count of failed
   * attempts (a message route's `maxAttempts`) starts anew as well: else
   * the next failure could hand the message to `deadLetter` at once. A
   * refused reset changes nothing, the count included; that of a key
   * without a record (a failing message's, between its attempts) goes with
   * `forget(scope, { key })`.
   * @returns `fenced`: whether a claim was taken from its owner.
   * @throws IdempotencyRecordNotFoundError, IdempotencyLeaseHeldError
   */
  async reset(
    key: string,
    scope: string = DEFAULT_SCOPE,
    options: { readonly force?: boolean } = {},
  ): Promise<{ readonly fenced: boolean }> {
    checkName('key', key);
    checkName('scope', scope);
    const outcome = await this.operation('resetRecord')(
      scope,
      key,
      options.force ?? false,
    );
    if (outcome.state === 'reset') {
      await this.store.forgetFailures?.({ scope, key });
    }
    switch (outcome.state) {
      case 'absent':
        throw new IdempotencyRecordNotFoundError(scope, key);
      case 'held':
        throw new IdempotencyLeaseHeldError(
          scope,
          key,
          outcome.leaseMs,
          outcome.owner,
        );
      default:
        return { fenced: outcome.fenced };
    }
  }

  /**
   * Deletes every record and step of `scope` (of one key with `key`), in
   * batches that each lock at most `batchSize` rows until they commit. A
   * claim among them is fenced out. Run it again if requests of the scope
   * kept arriving meanwhile.
   * @returns how many records and steps it deleted.
   */
  async forget(
    scope: string,
    options: IdempotencyForgetOptions = {},
  ): Promise<IdempotencyForgetResult> {
    checkName('scope', scope);
    if (options.key !== undefined) {
      checkName('key', options.key);
    }
    const batchSize = options.batchSize ?? 1000;
    checkCount('batchSize', batchSize, 10_000);
    const forget = this.operation('forgetRecords');
    let records = 0;
    let steps = 0;
    for (;;) {
      const batch = await forget(scope, options.key, batchSize);
      records += batch.records;
      steps += batch.steps;
      options.onBatch?.({ records, steps });
      if (!batch.more) {
        return { records, steps };
      }
    }
  }

  /**
   * For key rotation under `encryption`: seals the stored response of every
   * finished record (completed or failed) of `scope` again with the ring's
   * current key, page by page, so that the old keys can leave the ring. Each
   * record is written back only if its stored body and its generation are
   * still the ones read (a record completed, reset or taken again
   * meanwhile, even with the same body, is left alone and counted as
   * `changed`). Then the stored results of the steps of claims in progress
   * (a request that failed after a step keeps its key bound to them until
   * they expire) are resealed the same way, each written back only if it is
   * still the result read, and counted in `steps` (`resealed`, `current`,
   * `changed`); on a store without `readStepResults` and
   * `replaceStepResult`, none is, and `steps` is all 0. A response or step
   * it cannot open is named in `unreadable` and left as it is.
   * @throws IdempotencyConfigurationError without a key ring;
   * IdempotencyAdminUnsupportedError for a store without `replaceResponse`.
   */
  async reencrypt(
    options: IdempotencyReencryptOptions = {},
  ): Promise<IdempotencyReencryptResult> {
    const privacy = this.privacy;
    if (!privacy?.encrypted) {
      throw new IdempotencyConfigurationError(
        'There is no key ring to reseal the records with.',
        'Give IdempotencyModule `encryption: { keys, current }`, or IdempotencyAdmin an `IdempotencyPrivacy.withKeys(...)`.',
      );
    }
    const batchSize = options.batchSize ?? 100;
    checkCount('batchSize', batchSize, 1000);
    if (options.scope !== undefined) {
      checkName('scope', options.scope);
    }
    return reencryptRecords(
      privacy,
      {
        page: (cursor) =>
          this.list({
            status: ['completed', 'failed'],
            scope: options.scope,
            limit: batchSize,
            cursor,
          }),
        inspect: this.operation('inspectRecord'),
        replace: this.operation('replaceResponse'),
        claims: (cursor) =>
          this.list({
            status: ['in_progress'],
            scope: options.scope,
            limit: batchSize,
            cursor,
          }),
        readSteps: this.store.readStepResults?.bind(this.store),
        replaceStep: this.store.replaceStepResult?.bind(this.store),
      },
      options.onBatch,
    );
  }

  /** The store's operation, bound, or a clear refusal. */
  private operation<O extends AdminOperation>(
    name: O,
  ): NonNullable<IdempotencyStore[O]> {
    const operation = this.store[name];
    if (typeof operation !== 'function') {
      throw new IdempotencyAdminUnsupportedError(
        name,
        this.store.constructor?.name ?? 'in use',
      );
    }
    return operation.bind(this.store) as NonNullable<IdempotencyStore[O]>;
  }
}

/**
 * @throws IdempotencyAdminInputError for a name that is not a non-empty
 * string, that holds a NUL character, or that is not well-formed Unicode
 * (a lone surrogate): refused on every store alike, as PostgreSQL cannot
 * hold a NUL in text, and its driver writes U+FFFD in place of a lone
 * surrogate, which would name another record (a scope with U+FFFD
 * forgotten in its place). A request's key or scope holding either is
 * refused too: no record has one.
 */
function checkName(what: string, value: unknown): void {
  if (typeof value !== 'string' || value.length === 0) {
    throw new IdempotencyAdminInputError(
      `The ${what} must be a non-empty string.`,
    );
  }
  if (value.includes('\u0000')) {
    throw new IdempotencyAdminInputError(
      `The ${what} must not hold a NUL character (\\u0000).`,
    );
  }
  if (!value.isWellFormed()) {
    throw new IdempotencyAdminInputError(
      `The ${what} must be well-formed Unicode, without a lone surrogate.`,
    );
  }
}

function checkCount(what: string, value: number, max: number): void {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new IdempotencyAdminInputError(
      `\`${what}\` must be an integer from 1 to ${max}, not ${value}.`,
    );
  }
}

/** The first instant of the year 1 and the last of 9999 (UTC). */
const EARLIEST = Date.parse('0001-01-01T00:00:00.000Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * `instant` within the years 1 to 9999, which every store's timestamps
 * take (PostgreSQL refuses one before 4713 BC; JavaScript's reach further).
 */
function withinStores(instant: Date): Date {
  const time = instant.getTime();
  return time < EARLIEST
    ? new Date(EARLIEST)
    : time > LATEST
      ? new Date(LATEST)
      : instant;
}
