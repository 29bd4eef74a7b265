import { isUtf8 } from 'node:buffer';
import { setTimeout as delay } from 'node:timers/promises';
import {
  isHttpUrl,
  isNetworkError,
  isRefusedByFetch,
  isReplayableBody,
  isReplayed,
  isRetryableStatus,
  parseRetryAfter,
  retryDelay,
} from '../client/retry-policy.js';
import { NULL_BODY_STATUSES } from '../client/null-body-statuses.js';
import type { OutgoingCallRecord } from '../core/attempt-telemetry.js';
import type { HandlerContext } from '../core/handler-context.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { IdempotencyDownstreamRefusedException } from '../exceptions/idempotency-downstream-refused.exception.js';
import { IdempotencyDownstreamUnavailableException } from '../exceptions/idempotency-downstream-unavailable.exception.js';
import type { IdempotentFetchInit } from '../interfaces/idempotent-fetch.interface.js';
import {
  resolveFetchOptions,
  type ResolvedFetchOptions,
} from './outgoing.options.js';

/** A downstream answer as its step stores it: a JSON value. */
interface StoredAnswer {
  readonly status: number;
  readonly statusText: string;
  readonly headers: Array<[string, string]>;
  /** The body: UTF-8 text, or base64 when `base64`. */
  readonly body: string;
  readonly base64?: true;
}

/**
 * Headers that describe the bytes on the wire, not the body `fetch` gives
 * (already decoded): not kept with it.
 */
const WIRE_HEADERS = new Set([
  'content-encoding',
  'content-length',
  'transfer-encoding',
]);

/**
 * A reason phrase as HTTP defines it (tabs, spaces, visible ASCII and
 * obs-text: characters up to 0xFF), the only `statusText` a `Response` takes.
 */
const REASON_PHRASE = /^[\t\x20-\x7E\x80-\xFF]*$/;

/**
 * @internal An outgoing HTTP call of a handler as its recovery point `name`
 * (see `IdempotencyContext.fetch`): the stored answer of a previous attempt
 * of the request, else the call, sent with the key derived for `name` in
 * the downstream's idempotency header and sent again, always with that
 * key, until it gets a final answer, runs out of attempts, or meets the
 * handler's deadline. A call refused before it is sent (its options, URL,
 * body or request, or its step's name) derives no key.
 */
export async function idempotentFetch(
  context: HandlerContext,
  name: string,
  input: string | URL,
  init: IdempotentFetchInit,
  defaults: ResolvedFetchOptions,
): Promise<Response> {
  const { idempotency, signal, headers: given, ...rest } = init;
  const options = resolveFetchOptions(defaults, idempotency, 'idempotency');
  const url = toUrl(input);
  const body: unknown = rest.body;
  if (!isReplayableBody(body)) {
    throw new IdempotencyConfigurationError(
      `The body of the call of step ${JSON.stringify(name)} cannot be sent again byte for byte (a stream, an iterable, FormData, or another kind).`,
      'Give a string, bytes, a Blob or URLSearchParams (read a stream into bytes first; encode a multipart body yourself).',
    );
  }
  const method = (rest.method ?? 'GET').toUpperCase();
  let headers: Headers;
  try {
    headers = new Headers(given);
    // fetch would refuse it at every attempt, the same way: before any.
    new Request(url, { ...rest, method, headers });
  } catch (error) {
    throw unbuildable(name, error);
  }
  const call: Call = {
    name,
    url,
    init: { ...rest, method, headers },
    signal: signal ?? undefined,
    options,
  };
  const stored = await context.step(name, () => {
    // Derived only when the call is sent, its step bound: a derived key
    // binds the key to its request when the attempt fails (the call may
    // have gone through), and a call refused before (above, or by the
    // step's own checks) went nowhere. A UUID: a valid header value.
    const key = context.deriveKey(name);
    headers.set(options.headerName, key);
    return context.call({ step: name, method, url, key }, (record) =>
      send(context, call, record),
    );
  });
  return toResponse(stored);
}

/** One outgoing call, as {@link send} sends it. */
interface Call {
  readonly name: string;
  readonly url: URL;
  /** What each attempt is sent with, the key header included. */
  readonly init: RequestInit;
  /** The handler's own signal: its abort ends the call at once. */
  readonly signal: AbortSignal | undefined;
  readonly options: ResolvedFetchOptions;
}

/** Sends `call` until it gets a final answer, as {@link idempotentFetch} says. */
async function send(
  context: HandlerContext,
  call: Call,
  record: OutgoingCallRecord,
): Promise<StoredAnswer> {
  const { options, signal } = call;
  const { retry } = options;
  const fetch = options.fetch ?? globalThis.fetch;
  const until = Math.min(context.deadline, Date.now() + retry.deadlineMs);
  let lastError: unknown;
  let sent = 0;
  for (;;) {
    const left = until - Date.now();
    if (left <= 0) {
      break;
    }
    record.resends = sent;
    sent += 1;
    // A whole number of ms: AbortSignal.timeout() throws on any other,
    // and the options take any number (`timeoutMs: 2500.5`).
    const timeout = AbortSignal.timeout(
      Math.ceil(Math.min(options.timeoutMs, left)),
    );
    let retryAfterMs: number | undefined;
    try {
      const response = await fetch(call.url, {
        ...call.init,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      record.status = response.status;
      lastError = undefined;
      const replayed = isReplayed(response.headers, options.replayHeaderName);
      if (response.status < 400) {
        return await store(response);
      }
      if (!isRetryableStatus(response.status, replayed)) {
        throw new IdempotencyDownstreamRefusedException(call.name, {
          status: response.status,
          headers: Object.fromEntries(response.headers),
          body: await response.text(),
        });
      }
      retryAfterMs = parseRetryAfter(response.headers.get('retry-after'));
      // Frees the connection: the body of a retried answer is not read.
      await response.body?.cancel().catch(() => undefined);
    } catch (error) {
      if (isRefusedByFetch(error)) {
        // Built, but never sent: at every attempt the same.
        throw unbuildable(call.name, error);
      }
      if (
        error instanceof IdempotencyDownstreamRefusedException ||
        signal?.aborted ||
        !(isNetworkError(error) || timeout.aborted)
      ) {
        throw error;
      }
      record.status = undefined;
      lastError = error;
    }
    if (sent >= retry.attempts) {
      break;
    }
    const wait = retryDelay(sent, retry, retryAfterMs);
    if (Date.now() + wait >= until) {
      break;
    }
    await delay(wait, undefined, { signal });
  }
  throw new IdempotencyDownstreamUnavailableException(
    call.name,
    sent,
    record.status,
    context.retryAfter,
    lastError,
  );
}

/**
 * The absolute HTTP URL of `input`. A URL of another scheme is refused
 * without naming it, nor its scheme (`alice:s3cr3t@host` parses as the
 * scheme `alice:`): fetch fails on it at every attempt, or answers it
 * without any server (a `data:` URL).
 */
function toUrl(input: string | URL): URL {
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    // Not named: its query may hold a token.
    throw new IdempotencyConfigurationError(
      'IdempotencyContext.fetch() needs an absolute URL (a scheme and a host), and the one given does not parse as one.',
      'Give the downstream service its whole URL, such as https://api.example.com/charges.',
    );
  }
  if (!isHttpUrl(url)) {
    throw new IdempotencyConfigurationError(
      'IdempotencyContext.fetch() needs an http: or https: URL, not one of another scheme.',
      'Call the downstream service over HTTP or HTTPS.',
    );
  }
  return url;
}

/**
 * The error for a call that fetch refuses to build (`error`, the platform's
 * TypeError, is its cause): its message names neither the URL nor the
 * headers, which may hold secrets.
 */
function unbuildable(
  name: string,
  error: unknown,
): IdempotencyConfigurationError {
  const problem = new IdempotencyConfigurationError(
    `fetch cannot build the request of the call of step ${JSON.stringify(name)} (the error's cause says why).`,
    'Give a URL without a user name or password (send credentials in a header), no body with GET or HEAD, and valid header names and values.',
  );
  problem.cause = error;
  return problem;
}

/** A successful answer, read whole, as its step stores it. */
async function store(response: Response): Promise<StoredAnswer> {
  const bytes = Buffer.from(await response.arrayBuffer());
  const headers: Array<[string, string]> = [];
  response.headers.forEach((value, name) => {
    if (!WIRE_HEADERS.has(name)) {
      headers.push([name, value]);
    }
  });
  const text = isUtf8(bytes);
  return {
    status: response.status,
    statusText: reasonPhrase(response.statusText),
    headers,
    body: bytes.toString(text ? 'utf8' : 'base64'),
    ...(text ? {} : { base64: true as const }),
  };
}

/**
 * `text` when a `Response` takes it as its `statusText`, else `''`: fetch
 * decodes a reason phrase as UTF-8 (`201 Создано`), which a `Response`
 * refuses, and the stored answer must stay one that can be given back.
 */
function reasonPhrase(text: unknown): string {
  return typeof text === 'string' && REASON_PHRASE.test(text) ? text : '';
}

/**
 * The `Response` of a stored answer: the same for the call and its reuses.
 * A reason phrase a `Response` refuses, as earlier versions stored it, is
 * left out.
 */
function toResponse(stored: StoredAnswer): Response {
  const body = NULL_BODY_STATUSES.has(stored.status)
    ? null
    : stored.base64
      ? Buffer.from(stored.body, 'base64')
      : stored.body;
  return new Response(body, {
    status: stored.status,
    statusText: reasonPhrase(stored.statusText),
    headers: stored.headers,
  });
}
