import {
  resolveRetryOptions,
  type ResolvedRetryOptions,
} from '../client/retry-policy.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  IdempotentFetchFunction,
  IdempotentFetchOptions,
} from '../interfaces/idempotent-fetch.interface.js';
import { messageOf } from '../core/error-message.js';

/** @internal {@link IdempotentFetchOptions} with every default applied. */
export interface ResolvedFetchOptions {
  readonly headerName: string;
  readonly replayHeaderName: string;
  readonly retry: ResolvedRetryOptions;
  readonly timeoutMs: number;
  /** `undefined`: the platform's, as it is when a call is made. */
  readonly fetch: IdempotentFetchFunction | undefined;
}

/** A header name as RFC 9110 spells a token. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** The defaults of the `outgoing` option. */
export const FETCH_DEFAULTS: ResolvedFetchOptions = {
  headerName: 'Idempotency-Key',
  replayHeaderName: 'Idempotent-Replayed',
  retry: resolveRetryOptions(),
  timeoutMs: 10_000,
  fetch: undefined,
};

/**
 * @internal `options` over `base`, field by field, validated: at startup
 * for the module's `outgoing` option, at each call for its own.
 * @throws IdempotencyConfigurationError for an invalid value; `where` names
 * the option in its message.
 */
export function resolveFetchOptions(
  base: ResolvedFetchOptions,
  options: IdempotentFetchOptions | undefined,
  where: string,
): ResolvedFetchOptions {
  if (options === undefined) {
    return base;
  }
  if (typeof options !== 'object' || options === null) {
    throw new IdempotencyConfigurationError(
      `Invalid "${where}": ${String(options)}.`,
      'Give an object such as { retry: { attempts: 3 } }.',
    );
  }
  const headerName = options.headerName ?? base.headerName;
  if (typeof headerName !== 'string' || !HEADER_NAME.test(headerName)) {
    throw new IdempotencyConfigurationError(
      `Invalid "${where}.headerName": ${JSON.stringify(headerName)}.`,
      "Give an HTTP header name such as 'Idempotency-Key'.",
    );
  }
  const replayHeaderName = options.replayHeaderName ?? base.replayHeaderName;
  if (
    typeof replayHeaderName !== 'string' ||
    !HEADER_NAME.test(replayHeaderName)
  ) {
    throw new IdempotencyConfigurationError(
      `Invalid "${where}.replayHeaderName": ${JSON.stringify(replayHeaderName)}.`,
      "Give an HTTP header name such as 'Idempotent-Replayed'.",
    );
  }
  const timeoutMs = options.timeoutMs ?? base.timeoutMs;
  if (
    typeof timeoutMs !== 'number' ||
    !Number.isFinite(timeoutMs) ||
    timeoutMs < 1
  ) {
    throw new IdempotencyConfigurationError(
      `Invalid "${where}.timeoutMs": ${String(timeoutMs)}.`,
      'Give a number of milliseconds, 1 or more.',
    );
  }
  const fetch = options.fetch ?? base.fetch;
  if (fetch !== undefined && typeof fetch !== 'function') {
    throw new IdempotencyConfigurationError(
      `Invalid "${where}.fetch": it is not a function.`,
      "Give a function with the signature of fetch, or leave it out for the platform's.",
    );
  }
  let retry = base.retry;
  if (options.retry !== undefined) {
    try {
      retry = resolveRetryOptions(options.retry);
    } catch (error) {
      throw new IdempotencyConfigurationError(
        `Invalid "${where}.retry": ${messageOf(error)}`,
      );
    }
  }
  return { headerName, replayHeaderName, retry, timeoutMs, fetch };
}
