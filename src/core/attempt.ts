import type { ExecutionContext } from '@nestjs/common';
import { hash } from 'node:crypto';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import {
  IdempotencyKeyMissingException,
  type IdempotencyKeyLocation,
} from '../exceptions/idempotency-key-missing.exception.js';
import type { ResolvedRouteOptions } from './executor.options.js';
import { textProblem, validKey } from './idempotency-key.js';
import { isThenable } from './is-thenable.js';
import {
  boundFingerprint,
  isCurrentFingerprint,
  isLegacyFingerprint,
  legacyRequestFingerprint,
  requestFingerprint,
  selectFields,
  selectQuery,
  type FingerprintParts,
} from './request-fingerprint.js';

/** @internal A request (or message, or run) on its way through the module. */
export interface Attempt {
  /** When it arrived (epoch ms). */
  readonly started: number;
  readonly scope: string;
  /** `undefined` for a keyless request. */
  readonly key: string | undefined;
  readonly method: string;
  /** Route template, message pattern or run name. */
  readonly path: string;
  /** Empty for a keyless request. */
  readonly fingerprint: string;
  /**
   * The fingerprint the request would have had in 0.1.0, whose records are
   * compared by it until they expire. Only with the default fingerprint.
   */
  readonly legacyFingerprint?: () => string;
  /**
   * The `fingerprint` function's own value, which the records of 0.6 and
   * earlier carry as their fingerprint (without the method, the route and
   * the path parameters); they are compared by it until they expire, and
   * only records of the same method and path (see {@link isUnboundRecordOf}).
   */
  readonly unboundFingerprint?: UnboundFingerprint;
}

/**
 * @internal What a record written by 0.6 for a request with a `fingerprint`
 * function carries: the function's value alone as its fingerprint, and the
 * request's method and path beside it.
 */
export interface UnboundFingerprint {
  readonly value: string;
  readonly method: string;
  /** `undefined`: any path (a run's, whatever its name). */
  readonly path?: string;
}

/**
 * @internal Whether a record's `fingerprint` was written for the same
 * request as `attempt`: the same fingerprint, or, for a record written by
 * 0.1.0, the same fingerprint by 0.1.0's formula. A record of 0.6 that
 * carries the `fingerprint` function's value alone is not, until the record
 * proved of the same request ({@link mayBeUnboundRecord}).
 */
export function isSameRequest(attempt: Attempt, fingerprint: string): boolean {
  return (
    fingerprint === attempt.fingerprint ||
    (attempt.legacyFingerprint !== undefined &&
      isLegacyFingerprint(fingerprint) &&
      fingerprint === attempt.legacyFingerprint())
  );
}

/**
 * @internal Whether a record's `fingerprint` may be the one 0.6 wrote for
 * `attempt`'s request: the `fingerprint` function's value, which is not in
 * the form of the fingerprints the module writes now (a function that
 * returns one of them, as a client may make it do, never matches another
 * request's record by it). Such a record is of the request only if it also
 * has its method and path ({@link isUnboundRecordOf}): the value alone says
 * nothing of the route it was returned for.
 */
export function mayBeUnboundRecord(
  attempt: Attempt,
  fingerprint: string,
): boolean {
  return (
    attempt.unboundFingerprint?.value === fingerprint &&
    !isCurrentFingerprint(fingerprint)
  );
}

/**
 * @internal Whether a record that {@link mayBeUnboundRecord} is of
 * `attempt`'s request: it has its method and path (a run's, any path).
 */
export function isUnboundRecordOf(
  attempt: Attempt,
  record: { readonly method?: string; readonly path?: string },
): boolean {
  const unbound = attempt.unboundFingerprint;
  return (
    unbound !== undefined &&
    record.method === unbound.method &&
    (unbound.path === undefined || record.path === unbound.path)
  );
}

/**
 * @internal The scope the `scope` resolver returned, or `run()` was given,
 * checked.
 * @throws IdempotencyConfigurationError for another value than a non-empty
 * string that every store can keep apart from every other (see
 * {@link textProblem}), of at most {@link MAX_SCOPE_BYTES} bytes.
 */
export function validScope(scope: unknown): string {
  const problem = scopeProblem(scope);
  if (problem !== undefined) {
    throw new IdempotencyConfigurationError(
      `The idempotency scope ${problem} (as the scope resolver returned it, or run() or IdempotencyKafka.eachMessage() was given it).`,
      `Return a non-empty string of well-formed Unicode (no lone surrogate), without NUL characters, of at most ${MAX_SCOPE_BYTES} bytes (UTF-8), such as the id of the authenticated user or tenant.`,
    );
  }
  return scope as string;
}

/** What is wrong with a scope, for its refusal; `undefined` when nothing. */
function scopeProblem(scope: unknown): string | undefined {
  if (typeof scope !== 'string' || scope.length === 0) {
    return `is ${JSON.stringify(scope)}`;
  }
  const bytes =
    scope.length > MAX_SCOPE_BYTES / 3 ? Buffer.byteLength(scope) : 0;
  if (bytes > MAX_SCOPE_BYTES) {
    return `is ${bytes} bytes long`;
  }
  const problem = textProblem(scope);
  return problem && `is ${JSON.stringify(scope)}: ${problem}`;
}

/**
 * Longest scope, in bytes of UTF-8: with the longest key (1024 bytes, see
 * `MAX_KEY_BYTES`) and suffix, the record's primary key stays within
 * what PostgreSQL's index takes (2704 bytes), which a longer one would fail
 * at every claim (a 503 for ever).
 */
const MAX_SCOPE_BYTES = 1024;
/**
 * Longest key suffix kept as it is, in bytes of UTF-8; a longer one is kept
 * as its digest.
 */
const MAX_SUFFIX_BYTES = 256;

/**
 * A key's suffix as the record's key carries it: as it is, or, when longer
 * than {@link MAX_SUFFIX_BYTES} (a GraphQL alias of kilobytes), `#~` and
 * its SHA-256, so that the key stays within the record's index.
 */
function boundedSuffix(suffix: string | undefined): string {
  return suffix === undefined ||
    suffix.length <= MAX_SUFFIX_BYTES / 3 ||
    Buffer.byteLength(suffix) <= MAX_SUFFIX_BYTES
    ? (suffix ?? '')
    : `#~${hash('sha256', suffix)}`;
}

/** The fingerprint the `fingerprint` function returned, checked. */
function validFingerprint(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new IdempotencyConfigurationError(
      `The fingerprint function returned ${JSON.stringify(value)}.`,
      'Return a non-empty string, such as a hash of the parts of the request that matter.',
    );
  }
  return value;
}

/**
 * The fingerprint of a request or message and, with a `fingerprint`
 * function, the function's own value: the sha256 of its method, route, path
 * parameters, query and body (the fields of them that the `fingerprint`
 * option selects), or of its method, route, path parameters and the
 * function's value. Awaited only when the function returns a promise.
 */
function resolveFingerprint(
  context: ExecutionContext,
  options: ResolvedRouteOptions,
  parts: FingerprintParts,
): ResolvedFingerprint | Promise<ResolvedFingerprint> {
  const { fingerprint } = options;
  if (typeof fingerprint !== 'function') {
    return {
      fingerprint: requestFingerprint({
        ...parts,
        query: selectQuery(parts.query, fingerprint),
        body: selectFields(parts.body, fingerprint),
      }),
    };
  }
  const bind = (value: unknown): ResolvedFingerprint => {
    const unbound = validFingerprint(value);
    return WHOLE_FINGERPRINTS.has(fingerprint)
      ? { fingerprint: unbound }
      : { fingerprint: boundFingerprint(parts, unbound), unbound };
  };
  const value = fingerprint(context);
  return isThenable(value) ? Promise.resolve(value).then(bind) : bind(value);
}

/**
 * @internal The module's own `fingerprint` functions whose value is the
 * whole fingerprint, the route left out: a webhook receiver's, whose
 * events two routes may share (an old and a new path, one scope).
 */
export const WHOLE_FINGERPRINTS = new WeakSet<object>();

/** A request's fingerprint, and the `fingerprint` function's value. */
interface ResolvedFingerprint {
  readonly fingerprint: string;
  readonly unbound?: string;
}

/**
 * @internal How the records of 0.1.0 are matched: by its formula (method,
 * route and selected body), with the default fingerprint; not at all with a
 * `fingerprint` function, whose values did not change.
 */
export function legacyFingerprint(
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

/** @internal What a transport found of a request, for its attempt. */
export interface AttemptSource {
  /** When it arrived (epoch ms); by default, now. */
  readonly started?: number;
  /** The key as found (the header's, the resolver's), or `undefined`. */
  readonly key: unknown;
  /** Where a key is looked for, as errors name it (a header, a field). */
  readonly keyField: string;
  /** What `keyField` names; a header unless told. */
  readonly keyLocation?: IdempotencyKeyLocation;
  /** What the default fingerprint is made of; its method and route are the attempt's. */
  readonly parts: FingerprintParts;
  /**
   * Appended to a valid key: what tells apart the attempts of one request
   * (the response path of a GraphQL mutation).
   */
  readonly keySuffix?: string;
  /** Whether records of 0.1.0 may hold its key (HTTP and messages). */
  readonly legacy?: boolean;
  /**
   * Whether the key is the module's own, not a client's: a message's place
   * in its log. The key rules (`keyValidation`), which are the clients',
   * do not apply to it: a message is never refused for a key it did not
   * carry.
   */
  readonly made?: boolean;
}

/**
 * @internal The attempt of a request, message or job, by the same rules on
 * every transport: a key where the route requires one, valid by the key
 * rules; its scope; its fingerprint (none for a keyless request).
 * @throws IdempotencyKeyMissingException for a required key not found.
 * @throws IdempotencyKeyInvalidException for a key that breaks the rules.
 * @throws IdempotencyConfigurationError for a resolver's invalid result.
 */
export async function newAttempt(
  context: ExecutionContext,
  options: ResolvedRouteOptions,
  source: AttemptSource,
): Promise<Attempt> {
  const started = source.started ?? Date.now();
  const { parts } = source;
  if (source.key === undefined && options.required) {
    throw new IdempotencyKeyMissingException(
      source.keyField,
      source.keyLocation,
    );
  }
  const key =
    source.key === undefined
      ? undefined
      : source.made
        ? String(source.key)
        : validKey(
            source.key,
            options.keyValidation,
            source.keyField,
            source.keyLocation,
          );
  // The resolvers in turn (the scope's first), each awaited only when it
  // returns a promise.
  const resolved = options.scope(context);
  const scope = validScope(isThenable(resolved) ? await resolved : resolved);
  const found =
    key === undefined
      ? { fingerprint: '' }
      : resolveFingerprint(context, options, parts);
  const { fingerprint, unbound } = isThenable(found) ? await found : found;
  return {
    started,
    scope,
    key: key === undefined ? undefined : key + boundedSuffix(source.keySuffix),
    method: parts.method,
    path: parts.route,
    fingerprint,
    unboundFingerprint:
      unbound === undefined
        ? undefined
        : { value: unbound, method: parts.method, path: parts.route },
    legacyFingerprint:
      key !== undefined && source.legacy
        ? legacyFingerprint(options, parts)
        : undefined,
  };
}
