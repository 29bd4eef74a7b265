import type { ExecutionContext } from '@nestjs/common';
import { DEFAULT_SCOPE } from './idempotency.constants.js';
import {
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
} from './client/client.constants.js';
import { MAX_TIMER_MS, toMilliseconds } from './idempotency.duration.js';
import type { IdempotencyScopeResolver } from './interfaces/idempotency-options.interface.js';
import type {
  IdempotencyGcOptions,
  IdempotencyModuleOptions,
  IdempotencyTelemetryKeys,
  IdempotencyTelemetryOptions,
} from './interfaces/idempotency-module-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import {
  FETCH_DEFAULTS,
  resolveFetchOptions,
} from './outgoing/outgoing.options.js';
import {
  invalidOption,
  resolveRouteOptions,
  type ResolvedGcOptions,
  type ResolvedIdempotencyOptions,
  type ResolvedTelemetryOptions,
} from './idempotency.options.js';
import { IdempotencyKeyRing } from './privacy/idempotency-key-ring.js';

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

/** The expiry header's name with `expiresHeader: true`. */
const DEFAULT_EXPIRES_HEADER = 'Idempotency-Expires';

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
    invalidOption(
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
    invalidOption(
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
    invalidOption('presence', presence, 'Give true, false or { url: string }.');
  }
  const { adapter } = options;
  if (
    adapter !== undefined &&
    (typeof adapter !== 'object' ||
      adapter === null ||
      typeof adapter.create !== 'function')
  ) {
    invalidOption(
      'adapter',
      typeof adapter === 'object' && adapter !== null
        ? `an object without create(): ${Object.keys(adapter).join(', ')}`
        : adapter,
      'Give an adapter of a data library, such as `new PgIdempotencyAdapter({ poolToken })` of nestjs-idempotency/pg.',
    );
  }
  if (adapter !== undefined && options.dataSource !== undefined) {
    invalidOption(
      'dataSource',
      options.dataSource,
      'It names a TypeORM DataSource, and `adapter` is given: leave `dataSource` out, or give `adapter: new TypeOrmIdempotencyAdapter({ dataSource })` of nestjs-idempotency/typeorm.',
    );
  }
  const openApi = options.openApi ?? DEFAULTS.openApi;
  if (typeof openApi !== 'boolean') {
    invalidOption('openApi', openApi, 'Give true or false.');
  }
  const leaseMs = toMilliseconds(
    options.lease ?? DEFAULTS.lease,
    'lease',
    MAX_TIMER_MS,
  );
  if (leaseMs < 300) {
    invalidOption(
      'lease',
      options.lease,
      "Give a lease of 300 ms or more, such as '15s'.",
    );
  }
  const expiresHeaderName = resolveExpiresHeader(options.expiresHeader);
  const base: ResolvedIdempotencyOptions = {
    sealing:
      options.encryption === undefined
        ? undefined
        : new IdempotencyKeyRing(options.encryption),
    expiresHeaderName,
    expiresHeader: expiresHeaderName?.toLowerCase(),
    redact: undefined,
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
    maxAttempts: undefined,
    deadLetter: undefined,
    isolationLevel: undefined,
  };
  return resolveRouteOptions(base, options);
}

/** The name of the expiry header (`expiresHeader`), or `undefined` when off. */
function resolveExpiresHeader(value: unknown): string | undefined {
  const name = value === true ? DEFAULT_EXPIRES_HEADER : value;
  if (name === undefined || name === false) {
    return undefined;
  }
  if (
    typeof name !== 'string' ||
    !HEADER_NAME.test(name) ||
    RESERVED_RESPONSE_HEADERS.has(name.toLowerCase())
  ) {
    invalidOption(
      'expiresHeader',
      value,
      "Give true (`Idempotency-Expires`), false, or a header name of its own such as 'Idempotency-Key-Expires'.",
    );
  }
  return name;
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
    invalidOption(
      'telemetry',
      telemetry,
      "Give true, false or { keys: 'hash' }.",
    );
  }
  const keys =
    (typeof telemetry === 'object' ? telemetry.keys : undefined) ?? 'hash';
  if (!TELEMETRY_KEYS.includes(keys)) {
    invalidOption('telemetry.keys', keys, "Use 'hash', 'raw' or 'none'.");
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
    invalidOption(
      'gc.batchSize',
      batchSize,
      'Give a whole number of rows, 1 or more.',
    );
  }
  if (
    gc?.cron !== undefined &&
    (typeof gc.cron !== 'string' || gc.cron.trim() === '')
  ) {
    invalidOption(
      'gc.cron',
      gc.cron,
      "Give a cron expression such as '0 * * * *'.",
    );
  }
  return {
    intervalMs: toMilliseconds(
      gc?.interval ?? '5m',
      'gc.interval',
      MAX_TIMER_MS,
    ),
    cron: gc?.cron,
    batchSize,
    maxDurationMs: toMilliseconds(gc?.maxDuration ?? '10s', 'gc.maxDuration'),
  };
}
