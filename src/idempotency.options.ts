import { MAX_TIMER_MS, toMilliseconds } from './idempotency.duration.js';
import type {
  IdempotencyErrorPolicy,
  IdempotencyIsolationLevel,
  IdempotentOptions,
} from './interfaces/idempotency-options.interface.js';
import type {
  IdempotencyModuleOptions,
  IdempotencyTelemetryKeys,
} from './interfaces/idempotency-module-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import type { PostgresAdapter } from './interfaces/postgres-adapter.interface.js';
import { RETRY_LATER_STATUSES } from './core/failures.js';
import type {
  ExecutorOptions,
  ResolvedRouteOptions,
} from './core/executor.options.js';
import type { ResolvedFetchOptions } from './outgoing/outgoing.options.js';
import type { IdempotencyKeyRing } from './privacy/idempotency-key-ring.js';

/**
 * Largest `keyValidation.maxLength`, in UTF-16 code units; a key is besides
 * at most `MAX_KEY_BYTES` of UTF-8, what the record table's index takes.
 */
const MAX_KEY_LENGTH = 1024;

/** @internal Garbage collection options, with every default applied. */
export interface ResolvedGcOptions {
  readonly intervalMs: number;
  readonly cron: string | undefined;
  readonly batchSize: number;
  readonly maxDurationMs: number;
}

/** @internal Module options, with every default applied. */
export interface ResolvedIdempotencyOptions
  extends ResolvedRouteOptions, ExecutorOptions {
  /** `undefined` when disabled. */
  readonly gc: ResolvedGcOptions | undefined;
  readonly onEvent: IdempotencyModuleOptions['onEvent'];
  /** `undefined`: TypeORM's, on the DataSource named `dataSource`. */
  readonly adapter: PostgresAdapter | undefined;
  readonly dataSource: string | undefined;
  /** As configured, for messages. */
  readonly headerName: string;
  /** Lower-cased, as Node.js gives request headers. */
  readonly headerField: string;
  /** As configured, as responses carry it. */
  readonly replayHeaderName: string;
  /** `undefined`: the problem types are URNs. */
  readonly problemTypeBaseUrl: string | undefined;
  readonly leaseMs: number;
  readonly presence: false | true | { readonly url: string };
  readonly openApi: boolean;
  /** `false` when disabled. */
  readonly telemetry: false | ResolvedTelemetryOptions;
  /** The key ring of `encryption`; `undefined`: stored in the clear. */
  readonly sealing: IdempotencyKeyRing | undefined;
  /** As configured, as responses carry it; `undefined` when off. */
  readonly expiresHeaderName: string | undefined;
  /** How `IdempotencyContext.fetch()` calls, unless a call says otherwise. */
  readonly outgoing: ResolvedFetchOptions;
}

/** @internal Telemetry options, with every default applied. */
export interface ResolvedTelemetryOptions {
  readonly keys: IdempotencyTelemetryKeys;
}

/** The levels `START TRANSACTION ISOLATION LEVEL` takes. */
const ISOLATION_LEVELS: ReadonlySet<unknown> =
  new Set<IdempotencyIsolationLevel>([
    'READ UNCOMMITTED',
    'READ COMMITTED',
    'REPEATABLE READ',
    'SERIALIZABLE',
  ]);

/** @internal Whether `value` is an isolation level PostgreSQL takes. */
export function isIsolationLevel(
  value: unknown,
): value is IdempotencyIsolationLevel {
  return ISOLATION_LEVELS.has(value);
}

/** `storeErrors: true`: every 4xx but those that ask for a retry later. */
const storeClientErrors: IdempotencyErrorPolicy = (status) =>
  status >= 400 && status < 500 && !RETRY_LATER_STATUSES.has(status);

/**
 * @internal The configuration error of an option given an invalid value:
 * the option, the value, and what to give instead.
 */
export function invalidOption(
  option: string,
  value: unknown,
  solution: string,
): never {
  throw new IdempotencyConfigurationError(
    `Invalid "${option}": ${String(value instanceof RegExp ? value : JSON.stringify(value))}.`,
    solution,
  );
}

function lowerCaseSet(
  names: string[] | undefined,
  option: string,
): Set<string> | undefined {
  if (names === undefined) {
    return undefined;
  }
  if (!Array.isArray(names) || names.some((name) => typeof name !== 'string')) {
    invalidOption(option, names, 'Give an array of header names.');
  }
  return new Set(names.map((name) => name.toLowerCase()));
}

/** @internal Applies route options over already resolved ones. */
export function resolveRouteOptions<T extends ResolvedRouteOptions>(
  base: T,
  options: IdempotentOptions,
): T {
  if (
    options.concurrency !== undefined &&
    options.concurrency !== 'reject' &&
    options.concurrency !== 'wait'
  ) {
    throw new IdempotencyConfigurationError(
      `Invalid "concurrency": ${JSON.stringify(options.concurrency)}.`,
      "Use 'reject' or 'wait'.",
    );
  }
  if (options.redact !== undefined && typeof options.redact !== 'function') {
    invalidOption(
      'redact',
      options.redact,
      'Give a function of the response to store, returning { headers, body }.',
    );
  }
  if (
    options.retryAfter !== undefined &&
    !(Number.isInteger(options.retryAfter) && options.retryAfter >= 0)
  ) {
    throw new IdempotencyConfigurationError(
      `Invalid "retryAfter": ${JSON.stringify(options.retryAfter)}.`,
      'Give a whole number of seconds (0 or more).',
    );
  }
  const validation = { ...base.keyValidation, ...options.keyValidation };
  if (
    !Number.isInteger(validation.minLength) ||
    !Number.isInteger(validation.maxLength) ||
    validation.minLength < 1 ||
    validation.maxLength < validation.minLength ||
    validation.maxLength > MAX_KEY_LENGTH
  ) {
    invalidOption(
      'keyValidation',
      { minLength: validation.minLength, maxLength: validation.maxLength },
      `Give whole numbers with 1 <= minLength <= maxLength <= ${MAX_KEY_LENGTH}.`,
    );
  }
  if (!(validation.pattern instanceof RegExp)) {
    invalidOption(
      'keyValidation.pattern',
      validation.pattern,
      'Give a RegExp.',
    );
  }
  const { fingerprint } = options;
  if (
    fingerprint !== undefined &&
    typeof fingerprint !== 'function' &&
    (typeof fingerprint !== 'object' ||
      (fingerprint.include !== undefined &&
        !Array.isArray(fingerprint.include)) ||
      (fingerprint.exclude !== undefined &&
        !Array.isArray(fingerprint.exclude)))
  ) {
    invalidOption(
      'fingerprint',
      fingerprint,
      'Give { include?: string[], exclude?: string[] } or a function.',
    );
  }
  if (
    options.maxResponseSize !== undefined &&
    !(Number.isInteger(options.maxResponseSize) && options.maxResponseSize >= 0)
  ) {
    invalidOption(
      'maxResponseSize',
      options.maxResponseSize,
      'Give a whole number of bytes.',
    );
  }
  if (
    options.isolationLevel !== undefined &&
    !isIsolationLevel(options.isolationLevel)
  ) {
    invalidOption(
      'isolationLevel',
      options.isolationLevel,
      "Give 'READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ' or 'SERIALIZABLE'.",
    );
  }
  const { storeErrors } = options;
  const maxAttempts = options.maxAttempts ?? base.maxAttempts;
  const deadLetter = options.deadLetter ?? base.deadLetter;
  if (
    maxAttempts !== undefined &&
    (!Number.isInteger(maxAttempts) || maxAttempts < 1)
  ) {
    invalidOption(
      'maxAttempts',
      maxAttempts,
      'Give a whole number of attempts, 1 or more.',
    );
  }
  if ((maxAttempts === undefined) !== (deadLetter === undefined)) {
    throw new IdempotencyConfigurationError(
      '`maxAttempts` and `deadLetter` go together: a message that failed its attempts is handed to `deadLetter`.',
      'Give both (`maxAttempts: 5, deadLetter: (letter) => ...`), or neither.',
    );
  }
  return {
    ...base,
    ttlMs:
      options.ttl === undefined
        ? base.ttlMs
        : toMilliseconds(options.ttl, 'ttl'),
    concurrency: options.concurrency ?? base.concurrency,
    waitTimeoutMs:
      options.waitTimeout === undefined
        ? base.waitTimeoutMs
        : toMilliseconds(options.waitTimeout, 'waitTimeout', MAX_TIMER_MS),
    transactionTimeoutMs:
      options.transactionTimeout === undefined
        ? base.transactionTimeoutMs
        : toMilliseconds(
            options.transactionTimeout,
            'transactionTimeout',
            MAX_TIMER_MS,
          ),
    scope: options.scope ?? base.scope,
    required: options.required ?? base.required,
    retryAfter: options.retryAfter ?? base.retryAfter,
    key: options.key ?? base.key,
    keyValidation: validation,
    fingerprint: fingerprint ?? base.fingerprint,
    storeErrors:
      storeErrors === undefined
        ? base.storeErrors
        : storeErrors === true
          ? storeClientErrors
          : storeErrors === false
            ? undefined
            : storeErrors,
    maxResponseSize: options.maxResponseSize ?? base.maxResponseSize,
    replayAllow: options.replayHeaders?.allow
      ? lowerCaseSet(options.replayHeaders.allow, 'replayHeaders.allow')
      : base.replayAllow,
    replayDeny:
      lowerCaseSet(options.replayHeaders?.deny, 'replayHeaders.deny') ??
      base.replayDeny,
    acknowledge: options.acknowledge ?? base.acknowledge,
    maxAttempts,
    deadLetter,
    isolationLevel: options.isolationLevel ?? base.isolationLevel,
    redact: options.redact ?? base.redact,
    expiresHeader: base.expiresHeader,
  };
}
