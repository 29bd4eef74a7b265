import type { ExecutionContext } from '@nestjs/common';
import {
  DEFAULT_SCOPE,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
} from './idempotency.constants.js';
import { toMilliseconds } from './idempotency.duration.js';
import type {
  IdempotencyErrorPolicy,
  IdempotencyGcOptions,
  IdempotencyIsolationLevel,
  IdempotencyModuleOptions,
  IdempotencyScopeResolver,
  IdempotencyTelemetryKeys,
  IdempotencyTelemetryOptions,
  IdempotentOptions,
} from './interfaces/idempotency-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import type { PostgresAdapter } from './interfaces/postgres-adapter.interface.js';
import { RETRY_LATER_STATUSES } from './core/failures.js';
import type {
  ExecutorOptions,
  ResolvedRouteOptions,
} from './core/executor.options.js';
import {
  FETCH_DEFAULTS,
  resolveFetchOptions,
  type ResolvedFetchOptions,
} from './outgoing/outgoing.options.js';

/** Longest key the record table's index takes comfortably. */
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
  /** How `IdempotencyContext.fetch()` calls, unless a call says otherwise. */
  readonly outgoing: ResolvedFetchOptions;
}

/** @internal Telemetry options, with every default applied. */
export interface ResolvedTelemetryOptions {
  readonly keys: IdempotencyTelemetryKeys;
}

const globalScope: IdempotencyScopeResolver = (_context: ExecutionContext) =>
  DEFAULT_SCOPE;

/** The defaults of every option, in one place. */
const DEFAULTS = {
  ttl: '24h',
  concurrency: 'reject',
  waitTimeout: '10s',
  transactionTimeout: '30s',
  scope: globalScope,
  required: true,
  retryAfter: 1,
  headerName: IDEMPOTENCY_KEY_HEADER,
  replayHeaderName: IDEMPOTENT_REPLAYED_HEADER,
  keyValidation: { minLength: 1, maxLength: 255, pattern: /^[\x21-\x7e]+$/ },
  fingerprint: {},
  storeErrors: false,
  maxResponseSize: 1_048_576,
  lease: '15s',
  presence: true,
  openApi: true,
} as const satisfies IdempotencyModuleOptions;

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

function invalid(option: string, value: unknown, solution: string): never {
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
    invalid(option, names, 'Give an array of header names.');
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
    invalid(
      'keyValidation',
      { minLength: validation.minLength, maxLength: validation.maxLength },
      `Give whole numbers with 1 <= minLength <= maxLength <= ${MAX_KEY_LENGTH}.`,
    );
  }
  if (!(validation.pattern instanceof RegExp)) {
    invalid('keyValidation.pattern', validation.pattern, 'Give a RegExp.');
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
    invalid(
      'fingerprint',
      fingerprint,
      'Give { include?: string[], exclude?: string[] } or a function.',
    );
  }
  if (
    options.maxResponseSize !== undefined &&
    !(Number.isInteger(options.maxResponseSize) && options.maxResponseSize >= 0)
  ) {
    invalid(
      'maxResponseSize',
      options.maxResponseSize,
      'Give a whole number of bytes.',
    );
  }
  if (
    options.isolationLevel !== undefined &&
    !isIsolationLevel(options.isolationLevel)
  ) {
    invalid(
      'isolationLevel',
      options.isolationLevel,
      "Give 'READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ' or 'SERIALIZABLE'.",
    );
  }
  const { storeErrors } = options;
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
        : toMilliseconds(options.waitTimeout, 'waitTimeout'),
    transactionTimeoutMs:
      options.transactionTimeout === undefined
        ? base.transactionTimeoutMs
        : toMilliseconds(options.transactionTimeout, 'transactionTimeout'),
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
    isolationLevel: options.isolationLevel ?? base.isolationLevel,
  };
}

/** An HTTP header name (an RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Response headers a replay sends itself, which the replay header cannot
 * stand in for.
 */
const RESERVED_RESPONSE_HEADERS: ReadonlySet<string> = new Set([
  'content-type',
  'content-length',
  'transfer-encoding',
  'retry-after',
  'idempotent-body-omitted',
]);

/** The absolute URL `value`, or a configuration error. */
function absoluteUrl(option: string, value: unknown): string {
  if (typeof value !== 'string' || !URL.canParse(value)) {
    invalid(
      option,
      value,
      "Give an absolute URL such as 'https://docs.example.com/errors/' (the problem's slug is appended to it).",
    );
  }
  return value;
}

/** @internal Merges module options over the defaults, once. */
export function resolveModuleOptions(
  options: IdempotencyModuleOptions = {},
): ResolvedIdempotencyOptions {
  const headerName = options.headerName ?? DEFAULTS.headerName;
  if (typeof headerName !== 'string' || !HEADER_NAME.test(headerName)) {
    throw new IdempotencyConfigurationError(
      `Invalid "headerName": ${JSON.stringify(headerName)}.`,
      "Give an HTTP header name such as 'Idempotency-Key'.",
    );
  }
  const replayHeaderName =
    options.replayHeaderName ?? DEFAULTS.replayHeaderName;
  if (
    typeof replayHeaderName !== 'string' ||
    !HEADER_NAME.test(replayHeaderName) ||
    RESERVED_RESPONSE_HEADERS.has(replayHeaderName.toLowerCase())
  ) {
    invalid(
      'replayHeaderName',
      replayHeaderName,
      "Give an HTTP header name of its own such as 'Idempotent-Replayed' or 'Idempotency-Replayed'.",
    );
  }
  const problemTypeBaseUrl =
    options.problemTypeBaseUrl === undefined
      ? undefined
      : absoluteUrl('problemTypeBaseUrl', options.problemTypeBaseUrl);
  const presence = options.presence ?? DEFAULTS.presence;
  if (
    typeof presence !== 'boolean' &&
    !(
      typeof presence === 'object' &&
      presence !== null &&
      typeof presence.url === 'string' &&
      presence.url.length > 0
    )
  ) {
    invalid('presence', presence, 'Give true, false or { url: string }.');
  }
  const { adapter } = options;
  if (
    adapter !== undefined &&
    (typeof adapter !== 'object' ||
      adapter === null ||
      typeof adapter.create !== 'function')
  ) {
    invalid(
      'adapter',
      typeof adapter === 'object' && adapter !== null
        ? `an object without create(): ${Object.keys(adapter).join(', ')}`
        : adapter,
      'Give an adapter of a data library, such as `new PgIdempotencyAdapter({ poolToken })` of nestjs-idempotency/pg.',
    );
  }
  if (adapter !== undefined && options.dataSource !== undefined) {
    invalid(
      'dataSource',
      options.dataSource,
      'It names a TypeORM DataSource, and `adapter` is given: leave `dataSource` out, or give `adapter: new TypeOrmIdempotencyAdapter({ dataSource })` of nestjs-idempotency/typeorm.',
    );
  }
  const openApi = options.openApi ?? DEFAULTS.openApi;
  if (typeof openApi !== 'boolean') {
    invalid('openApi', openApi, 'Give true or false.');
  }
  const leaseMs = toMilliseconds(options.lease ?? DEFAULTS.lease, 'lease');
  if (leaseMs < 300) {
    invalid(
      'lease',
      options.lease,
      "Give a lease of 300 ms or more, such as '15s'.",
    );
  }
  const base: ResolvedIdempotencyOptions = {
    gc: resolveGcOptions(options.gc),
    leaseMs,
    presence,
    openApi,
    telemetry: resolveTelemetryOptions(options.telemetry),
    outgoing: resolveFetchOptions(FETCH_DEFAULTS, options.outgoing, 'outgoing'),
    onEvent: options.onEvent,
    adapter,
    dataSource: options.dataSource,
    headerName,
    headerField: headerName.toLowerCase(),
    replayHeaderName,
    problemTypeBaseUrl,
    ttlMs: toMilliseconds(DEFAULTS.ttl, 'ttl'),
    concurrency: DEFAULTS.concurrency,
    waitTimeoutMs: toMilliseconds(DEFAULTS.waitTimeout, 'waitTimeout'),
    transactionTimeoutMs: toMilliseconds(
      DEFAULTS.transactionTimeout,
      'transactionTimeout',
    ),
    scope: DEFAULTS.scope,
    required: DEFAULTS.required,
    retryAfter: DEFAULTS.retryAfter,
    key: undefined,
    keyValidation: { ...DEFAULTS.keyValidation, validate: undefined },
    fingerprint: DEFAULTS.fingerprint,
    storeErrors: undefined,
    maxResponseSize: DEFAULTS.maxResponseSize,
    replayAllow: undefined,
    replayDeny: new Set(),
    acknowledge: false,
    isolationLevel: undefined,
  };
  return resolveRouteOptions(base, options);
}

const TELEMETRY_KEYS: readonly IdempotencyTelemetryKeys[] = [
  'hash',
  'raw',
  'none',
];

function resolveTelemetryOptions(
  telemetry: boolean | IdempotencyTelemetryOptions | undefined,
): false | ResolvedTelemetryOptions {
  if (telemetry === false) {
    return false;
  }
  if (
    telemetry !== undefined &&
    telemetry !== true &&
    (typeof telemetry !== 'object' || telemetry === null)
  ) {
    invalid('telemetry', telemetry, "Give true, false or { keys: 'hash' }.");
  }
  const keys =
    (typeof telemetry === 'object' ? telemetry.keys : undefined) ?? 'hash';
  if (!TELEMETRY_KEYS.includes(keys)) {
    invalid('telemetry.keys', keys, "Use 'hash', 'raw' or 'none'.");
  }
  return { keys };
}

function resolveGcOptions(
  gc: false | IdempotencyGcOptions | undefined,
): ResolvedGcOptions | undefined {
  if (gc === false) {
    return undefined;
  }
  const batchSize = gc?.batchSize ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    invalid(
      'gc.batchSize',
      batchSize,
      'Give a whole number of rows, 1 or more.',
    );
  }
  if (
    gc?.cron !== undefined &&
    (typeof gc.cron !== 'string' || gc.cron.trim() === '')
  ) {
    invalid('gc.cron', gc.cron, "Give a cron expression such as '0 * * * *'.");
  }
  return {
    intervalMs: toMilliseconds(gc?.interval ?? '5m', 'gc.interval'),
    cron: gc?.cron,
    batchSize,
    maxDurationMs: toMilliseconds(gc?.maxDuration ?? '10s', 'gc.maxDuration'),
  };
}
