import { Injectable, type ExecutionContext } from '@nestjs/common';
import type { QueryRunner } from 'typeorm';
import type { ResolvedRouteOptions } from './idempotency.options.js';
import { IdempotencyEvents } from './idempotency.events.js';
import {
  isLegacyFingerprint,
  legacyRequestFingerprint,
  requestFingerprint,
  selectFields,
  selectQuery,
  type FingerprintParts,
} from './http/request-fingerprint.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import type { IdempotencyEventType } from './interfaces/idempotency-event.interface.js';
import { IdempotencyConflictException } from './exceptions/idempotency-conflict.exception.js';
import { IdempotencyKeyReusedException } from './exceptions/idempotency-key-reused.exception.js';
import { IdempotencyUnavailableException } from './exceptions/idempotency-unavailable.exception.js';
import { IdempotencyNotReplayableException } from './exceptions/idempotency-not-replayable.exception.js';
import {
  IdempotencyStore,
  type ClaimResult,
  type RequestIdentity,
  type StoredRecord,
} from './store/idempotency.store.js';
import { ambientTransactions } from './store/ambient-transaction.js';

/** @internal A request (or message, or run) on its way through the module. */
export interface Attempt {
  readonly started: number;
  readonly scope: string;
  readonly key: string | undefined;
  readonly method: string;
  readonly path: string;
  /** Empty for a keyless request. */
  readonly fingerprint: string;
  /**
   * The fingerprint the request would have had in 0.1.0, whose records are
   * compared by it until they expire. Only with the default fingerprint.
   */
  readonly legacyFingerprint?: () => string;
}

/** @internal The identity of a request that has a key. */
export function identity(attempt: Attempt): RequestIdentity | undefined {
  return attempt.key === undefined ? undefined : (attempt as RequestIdentity);
}

/**
 * @internal What HTTP requests, messages and programmatic runs share: claiming
 * a key under the concurrency policy, running code in the ambient
 * transaction, and reporting events.
 */
@Injectable()
export class IdempotencyEngine {
  constructor(
    readonly store: IdempotencyStore,
    private readonly events: IdempotencyEvents,
  ) {}

  /**
   * Claims the key of a request.
   * @returns the finished record to replay, or `undefined` once this
   * transaction owns the key.
   */
  async claim(
    queryRunner: QueryRunner,
    id: RequestIdentity,
    options: ResolvedRouteOptions,
    attempt: Attempt,
  ): Promise<StoredRecord | undefined> {
    let claim: ClaimResult;
    try {
      claim = await this.store.claim(
        queryRunner,
        id,
        options.transactionTimeoutMs,
      );
      if (
        claim.state === 'busy' &&
        options.concurrency === 'wait' &&
        (await this.store.waitForLock(queryRunner, id, options.waitTimeoutMs))
      ) {
        claim = await this.store.claim(
          queryRunner,
          id,
          options.transactionTimeoutMs,
        );
      }
    } catch (error) {
      this.emit('failed', attempt, { error });
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    switch (claim.state) {
      case 'claimed':
        return undefined;
      case 'finished':
        return claim.record;
      case 'busy':
        this.emit('conflict', attempt, { status: 409 });
        throw new IdempotencyConflictException(id.key, options.retryAfter);
      case 'mismatch':
        this.emit('mismatch', attempt, { status: 422 });
        throw new IdempotencyKeyReusedException(id.key);
    }
  }

  /** The scope of a request or message, from the `scope` resolver. */
  async scope(
    context: ExecutionContext,
    options: ResolvedRouteOptions,
  ): Promise<string> {
    const scope = await options.scope(context);
    if (typeof scope !== 'string' || scope.length === 0) {
      throw new IdempotencyConfigurationError(
        `The idempotency scope resolver returned ${JSON.stringify(scope)}.`,
        'Return a non-empty string, such as the id of the authenticated user or tenant.',
      );
    }
    return scope;
  }

  /**
   * The fingerprint of a request or message: the `fingerprint` function's,
   * or the sha256 of its method, route, path parameters, query and body (the
   * fields of them that the `fingerprint` option selects).
   */
  async fingerprint(
    context: ExecutionContext,
    options: ResolvedRouteOptions,
    parts: FingerprintParts,
  ): Promise<string> {
    const { fingerprint } = options;
    if (typeof fingerprint !== 'function') {
      return requestFingerprint({
        ...parts,
        query: selectQuery(parts.query, fingerprint),
        body: selectFields(parts.body, fingerprint),
      });
    }
    const value = await fingerprint(context);
    if (typeof value !== 'string' || value.length === 0) {
      throw new IdempotencyConfigurationError(
        `The fingerprint function returned ${JSON.stringify(value)}.`,
        'Return a non-empty string, such as a hash of the parts of the request that matter.',
      );
    }
    return value;
  }

  /**
   * How the records of 0.1.0 are matched: by its formula (method, route and
   * selected body), with the default fingerprint; not at all with a
   * `fingerprint` function, whose values did not change.
   */
  legacyFingerprint(
    options: ResolvedRouteOptions,
    parts: Pick<FingerprintParts, 'method' | 'route' | 'body'>,
  ): (() => string) | undefined {
    const { fingerprint } = options;
    return typeof fingerprint === 'function'
      ? undefined
      : () =>
          legacyRequestFingerprint({
            ...parts,
            body: selectFields(parts.body, fingerprint),
          });
  }

  /**
   * Whether a finished record was written for the same request as
   * `attempt`: the same fingerprint, or, for a record written by 0.1.0, the
   * same fingerprint by 0.1.0's formula.
   */
  sameRequest(record: StoredRecord, attempt: Attempt): boolean {
    return (
      record.fingerprint === attempt.fingerprint ||
      (attempt.legacyFingerprint !== undefined &&
        isLegacyFingerprint(record.fingerprint) &&
        record.fingerprint === attempt.legacyFingerprint())
    );
  }

  /** Runs `fn` with `queryRunner`'s transaction as the ambient one. */
  inTransaction<T>(
    queryRunner: QueryRunner,
    attempt: Attempt,
    ttlMs: number,
    fn: () => Promise<T>,
  ): Promise<T> {
    return ambientTransactions.run(
      {
        dataSource: this.store.source,
        queryRunner,
        manager: queryRunner.manager,
        scope: attempt.scope,
        key: attempt.key,
        ttlMs,
      },
      fn,
    );
  }

  emit(
    type: IdempotencyEventType,
    attempt: Attempt,
    extra: { status?: number; error?: unknown } = {},
  ): void {
    this.events.emit({
      type,
      scope: attempt.scope,
      key: attempt.key,
      method: attempt.method,
      path: attempt.path,
      durationMs: Date.now() - attempt.started,
      ...extra,
    });
  }

  /**
   * Stores `result` (a JSON value) as the record of a claimed key and
   * commits: for messages and programmatic runs.
   */
  async commitResult(
    queryRunner: QueryRunner,
    attempt: Attempt & RequestIdentity,
    result: unknown,
    ttlMs: number,
  ): Promise<void> {
    const json = result === undefined ? undefined : JSON.stringify(result);
    await this.store.complete(
      queryRunner,
      attempt,
      'completed',
      {
        status: 200,
        headers: {},
        body: json === undefined ? Buffer.alloc(0) : Buffer.from(json),
      },
      ttlMs,
    );
    await this.store.commit(queryRunner);
    this.emit('executed', attempt);
  }

  /**
   * The stored result for a duplicate of a finished message or run.
   * @throws IdempotencyKeyReusedException for another request's key.
   * @throws IdempotencyNotReplayableException when nothing was stored.
   */
  storedResult(
    attempt: Attempt & RequestIdentity,
    record: StoredRecord,
  ): unknown {
    if (!this.sameRequest(record, attempt)) {
      this.emit('mismatch', attempt);
      throw new IdempotencyKeyReusedException(attempt.key);
    }
    if (record.status === 'not_replayable') {
      this.emit('not-replayable', attempt);
      throw new IdempotencyNotReplayableException(attempt.key);
    }
    this.emit('replayed', attempt);
    const { body } = record.response;
    return body.length === 0
      ? undefined
      : (JSON.parse(body.toString('utf8')) as unknown);
  }
}
