import type { ExecutionContext } from '@nestjs/common';
import {
  DEFAULT_SCOPE,
  IDEMPOTENCY_KEY_HEADER,
} from './idempotency.constants.js';
import { toMilliseconds } from './idempotency.duration.js';
import type {
  IdempotencyConcurrencyMode,
  IdempotencyModuleOptions,
  IdempotencyScopeResolver,
  IdempotentOptions,
} from './interfaces/idempotency-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';

/** @internal Options of one route, with every default applied. */
export interface ResolvedRouteOptions {
  readonly ttlMs: number;
  readonly concurrency: IdempotencyConcurrencyMode;
  readonly waitTimeoutMs: number;
  readonly transactionTimeoutMs: number;
  readonly scope: IdempotencyScopeResolver;
  readonly required: boolean;
  readonly retryAfter: number;
}

/** @internal Module options, with every default applied. */
export interface ResolvedIdempotencyOptions extends ResolvedRouteOptions {
  readonly dataSource: string | undefined;
  /** As configured, for messages. */
  readonly headerName: string;
  /** Lower-cased, as Node.js gives request headers. */
  readonly headerField: string;
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
} as const satisfies IdempotencyModuleOptions;

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
  };
}

/** @internal Merges module options over the defaults, once. */
export function resolveModuleOptions(
  options: IdempotencyModuleOptions = {},
): ResolvedIdempotencyOptions {
  const headerName = options.headerName ?? DEFAULTS.headerName;
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(headerName)) {
    throw new IdempotencyConfigurationError(
      `Invalid "headerName": ${JSON.stringify(headerName)}.`,
      "Give an HTTP header name such as 'Idempotency-Key'.",
    );
  }
  const base: ResolvedIdempotencyOptions = {
    dataSource: options.dataSource,
    headerName,
    headerField: headerName.toLowerCase(),
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
  };
  return resolveRouteOptions(base, options);
}
