import {
  HttpException,
  Inject,
  Injectable,
  Logger,
  StreamableFile,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { PATH_METADATA } from '@nestjs/common/constants.js';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { defer, lastValueFrom, type Observable } from 'rxjs';
import type { QueryRunner } from 'typeorm';
import {
  IDEMPOTENT_METADATA,
  IDEMPOTENT_REPLAYED_HEADER,
  UNSAFE_REPLAY_HEADERS,
} from './idempotency.constants.js';
import { HANDLER_METADATA } from './idempotency.handlers.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import {
  resolveRouteOptions,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from './idempotency.options.js';
import type { IdempotentOptions } from './interfaces/idempotency-options.interface.js';
import { IdempotencyHttpException } from './exceptions/idempotency-http.exception.js';
import { IdempotencyKeyMissingException } from './exceptions/idempotency-key-missing.exception.js';
import { IdempotencyKeyInvalidException } from './exceptions/idempotency-key-invalid.exception.js';
import { IdempotencyKeyReusedException } from './exceptions/idempotency-key-reused.exception.js';
import { IdempotencyNotReplayableException } from './exceptions/idempotency-not-replayable.exception.js';
import { IdempotencyUnavailableException } from './exceptions/idempotency-unavailable.exception.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import {
  IdempotencyEngine,
  identity,
  type Attempt,
} from './idempotency.engine.js';
import { IdempotencyMessages } from './idempotency.messages.js';
import {
  IdempotencyStore,
  type RequestIdentity,
  type StoredRecord,
  type StoredResponse,
} from './store/idempotency.store.js';
import {
  holdResponse,
  type CapturedResponse,
} from './http/response-capture.js';
import { readKeyHeader, validKey } from './http/idempotency-key.js';
import {
  queryParameters,
  type FingerprintParts,
} from './http/request-fingerprint.js';

/** What the interceptor knows of a decorated handler, computed once. */
interface DecoratedRoute {
  readonly options: ResolvedRouteOptions;
  /** Route template, e.g. `/payments/:id`. */
  readonly path: string;
  /** Message pattern, for microservice handlers. */
  readonly pattern: string;
}

/** SQLSTATE of a statement cancelled: on `statement_timeout`, or by request. */
const QUERY_CANCELED = '57014';
/** SQLSTATEs of PostgreSQL ending a statement or a transaction on a timeout. */
const TIMEOUT_CODES = new Set([QUERY_CANCELED, '25P03', '25P04']);

/** SQLSTATE of a database error, if it has one. */
function sqlState(error: unknown): string | undefined {
  return (
    (error as { driverError?: { code?: string }; code?: string })?.driverError
      ?.code ?? (error as { code?: string })?.code
  );
}

/**
 * Whether PostgreSQL ended the request's transaction on its timeout: by the
 * error code, or, once the session is gone, by the time spent.
 */
function isDatabaseTimeout(
  error: unknown,
  attempt: Attempt,
  options: ResolvedRouteOptions,
): boolean {
  const code = sqlState(error);
  return (
    (code !== undefined && TIMEOUT_CODES.has(code)) ||
    (error instanceof Error &&
      Date.now() - attempt.started >= options.transactionTimeoutMs)
  );
}

/**
 * SQLSTATEs of PostgreSQL ending a session: terminated by an administrator, a
 * crash or a shutdown (57P01-57P03), or on the idle-in-transaction or
 * transaction timeout (25P03, 25P04).
 */
const SESSION_ENDED_CODES = new Set([
  '57P01',
  '57P02',
  '57P03',
  '25P03',
  '25P04',
]);

/**
 * Whether a handler failed because its transaction was lost: its connection
 * broke (the driver then released the query runner; SQLSTATE class 08) or
 * PostgreSQL ended its session. Nothing was written, so the client may retry.
 * The handler's own HTTP answers are kept.
 */
function isTransactionLost(queryRunner: QueryRunner, error: unknown): boolean {
  if (error instanceof HttpException) {
    return false;
  }
  const code = sqlState(error);
  return (
    queryRunner.isReleased ||
    (code !== undefined &&
      (code.startsWith('08') || SESSION_ENDED_CODES.has(code))) ||
    isConnectionError(error)
  );
}

/** Errors of a socket to the server, as Node.js names them. */
const SOCKET_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * Whether a query of the handler failed because its connection broke (the
 * handler's own, or another one it used, such as a step's): a socket error,
 * or the driver's "Connection terminated", neither of which carries a
 * SQLSTATE. The handler's connection is gone too when the server is, even
 * before the driver notices. Only TypeORM's query errors (`driverError`)
 * count: the handler's own HTTP clients may fail with the same codes.
 */
function isConnectionError(error: unknown): boolean {
  const { code, message } = ((error as { driverError?: unknown })
    ?.driverError ?? {}) as { code?: unknown; message?: unknown };
  return (
    (typeof code === 'string' && SOCKET_ERRORS.has(code)) ||
    (typeof message === 'string' && message.startsWith('Connection terminated'))
  );
}

type HttpRequest = IncomingMessage & {
  body?: unknown;
  params?: Record<string, unknown>;
  /** Express: the URL as received, before any mount point was cut off. */
  originalUrl?: string;
  raw?: IncomingMessage;
};

/**
 * What the default fingerprint of an HTTP request is made of. The query is
 * read from the URL itself, the same way on every platform.
 */
function fingerprintParts(
  context: ExecutionContext,
  route: string,
): FingerprintParts {
  const request = context.switchToHttp().getRequest<HttpRequest>();
  return {
    method: request.method ?? 'GET',
    route,
    params: { ...request.params },
    query: queryParameters(request.originalUrl ?? (request.raw ?? request).url),
    body: request.body,
  };
}
type HttpResponse = { raw?: ServerResponse } & object;

const UNSAFE_HEADERS = new Set(UNSAFE_REPLAY_HEADERS);

function joinPaths(...parts: unknown[]): string {
  const segments = parts
    .flatMap((part) => (Array.isArray(part) ? part.slice(0, 1) : [part]))
    .filter((part): part is string => typeof part === 'string')
    .map((part) => part.replace(/^\/+|\/+$/g, ''))
    .filter((part) => part.length > 0);
  return `/${segments.join('/')}`;
}

/** A body the platform streams: it is sent as it is produced, never whole. */
function isStream(value: unknown): boolean {
  return (
    value instanceof StreamableFile ||
    value instanceof Readable ||
    value instanceof ReadableStream ||
    value instanceof Response ||
    (typeof value === 'object' &&
      value !== null &&
      typeof (value as AsyncIterable<unknown>)[Symbol.asyncIterator] ===
        'function' &&
      typeof (value as PromiseLike<unknown>).then !== 'function')
  );
}

/**
 * Global interceptor registered by `IdempotencyModule`. For a handler
 * decorated with `@Idempotent()`, it runs the handler in a transaction shared
 * with the application's repositories, stores the response in the same
 * transaction, and replays it for duplicates. Other handlers pass through
 * untouched.
 *
 * Subclass it and override the `protected` hooks to change how the key, the
 * scope or the fingerprint of a request are found.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly logger = new Logger('Idempotency');
  private readonly routes = new WeakMap<object, DecoratedRoute | null>();

  constructor(
    private readonly reflector: Reflector,
    private readonly store: IdempotencyStore,
    private readonly adapterHost: HttpAdapterHost,
    private readonly engine: IdempotencyEngine,
    private readonly messages: IdempotencyMessages,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const type = context.getType();
    if (type !== 'http' && type !== 'rpc') {
      return next.handle();
    }
    const route = this.route(context);
    if (!route) {
      return next.handle();
    }
    return defer(() =>
      type === 'http'
        ? this.execute(context, next, route)
        : this.messages.execute(context, next, route.options, route.pattern),
    );
  }

  /**
   * The idempotency key of a request, or `undefined` when it carries none:
   * the `key` option's resolver, else the key header (a token or a quoted
   * sf-string). Override to take the key from elsewhere.
   * @throws IdempotencyKeyInvalidException for a malformed or repeated key.
   */
  protected async resolveKey(
    context: ExecutionContext,
    options: ResolvedRouteOptions,
  ): Promise<string | undefined> {
    let key: unknown;
    if (options.key) {
      key = await options.key(context);
    } else {
      const request = context.switchToHttp().getRequest<HttpRequest>();
      const reading = readKeyHeader(
        request.raw ?? request,
        this.options.headerField,
      );
      if (reading && 'problem' in reading) {
        throw new IdempotencyKeyInvalidException(
          this.options.headerName,
          reading.problem,
        );
      }
      key = reading?.key;
    }
    return key === undefined
      ? undefined
      : validKey(key, options.keyValidation, this.options.headerName);
  }

  /** The scope of a request. Override to derive it differently. */
  protected async resolveScope(
    context: ExecutionContext,
    options: ResolvedRouteOptions,
  ): Promise<string> {
    return this.engine.scope(context, options);
  }

  /**
   * Fingerprint of a request: by default the sha256 of its method, route
   * template, path parameters, query parameters and canonical body (or the
   * fields of them the `fingerprint` option names). Override to include or
   * exclude other parts of the request.
   */
  protected async fingerprint(
    context: ExecutionContext,
    options: ResolvedRouteOptions,
    routePath: string,
  ): Promise<string> {
    return this.engine.fingerprint(
      context,
      options,
      fingerprintParts(context, routePath),
    );
  }

  private route(context: ExecutionContext): DecoratedRoute | null {
    const handler = context.getHandler();
    let route = this.routes.get(handler);
    if (route === undefined) {
      const options = this.reflector.getAllAndOverride<
        IdempotentOptions | undefined
      >(IDEMPOTENT_METADATA, [handler, context.getClass()]);
      const patterns = Reflect.getMetadata(
        HANDLER_METADATA.messagePattern,
        handler,
      ) as unknown[] | undefined;
      const pattern =
        patterns?.[0] ?? `${context.getClass().name}.${handler.name}`;
      route = options
        ? {
            options: resolveRouteOptions(this.options, options),
            path: joinPaths(
              Reflect.getMetadata(PATH_METADATA, context.getClass()),
              Reflect.getMetadata(PATH_METADATA, handler),
            ),
            pattern:
              typeof pattern === 'string' ? pattern : JSON.stringify(pattern),
          }
        : null;
      this.routes.set(handler, route);
    }
    return route;
  }

  private async execute(
    context: ExecutionContext,
    next: CallHandler,
    route: DecoratedRoute,
  ): Promise<unknown> {
    const started = Date.now();
    const http = context.switchToHttp();
    const response = http.getResponse<HttpResponse>();
    const { options } = route;
    let key: string | undefined;
    try {
      key = await this.resolveKey(context, options);
      if (key === undefined && options.required) {
        throw new IdempotencyKeyMissingException(this.options.headerName);
      }
    } catch (error) {
      throw this.answer(response, error);
    }
    const request = http.getRequest<HttpRequest>();
    const method = request.method ?? 'GET';
    const attempt: Attempt = {
      started,
      scope: await this.resolveScope(context, options),
      key,
      method,
      path: route.path,
      fingerprint:
        key === undefined
          ? ''
          : await this.fingerprint(context, options, route.path),
      legacyFingerprint:
        key === undefined
          ? undefined
          : this.engine.legacyFingerprint(options, {
              method,
              route: route.path,
              body: request.body,
            }),
    };
    let queryRunner: QueryRunner;
    try {
      queryRunner = await this.store.begin(options.transactionTimeoutMs);
    } catch (error) {
      this.engine.emit('failed', attempt, { error });
      throw this.answer(
        response,
        new IdempotencyUnavailableException(options.retryAfter),
      );
    }
    let running = false;
    try {
      const id = identity(attempt);
      if (id) {
        const record = await this.engine.claim(
          queryRunner,
          id,
          options,
          attempt,
        );
        if (record) {
          await this.store.rollback(queryRunner);
          return this.replay(id, record, attempt);
        }
      } else {
        await this.store.bound(queryRunner, options.transactionTimeoutMs);
      }
      running = true;
      const outcome = await this.engine.inTransaction(
        queryRunner,
        attempt,
        options.ttlMs,
        () => lastValueFrom(next.handle(), { defaultValue: undefined }),
      );
      running = false;
      await this.finish(response, queryRunner, options, attempt, outcome);
      return outcome;
    } catch (error) {
      // Before the rollback, which releases the query runner.
      const lostBefore = running && isTransactionLost(queryRunner, error);
      const rolledBack = await this.store.rollback(queryRunner);
      // A rollback that fails tells that the connection is gone, whichever
      // connection the handler's error came from (a step's may break first).
      const lost =
        lostBefore ||
        (running && !rolledBack && !(error instanceof HttpException));
      if (running && isDatabaseTimeout(error, attempt, options)) {
        this.engine.emit('timeout', attempt, { error });
      } else if (lost) {
        this.engine.emit('failed', attempt, { error });
      }
      // A statement the server cancelled (its `statement_timeout`, which the
      // module sets to `transactionTimeout`, or an administrator) aborted the
      // whole transaction: nothing was written, and the retry may run.
      const cancelled =
        running &&
        !(error instanceof HttpException) &&
        sqlState(error) === QUERY_CANCELED;
      const unavailable = lost || cancelled;
      const id = identity(attempt);
      // The module's own 503 means "nothing happened, retry": never stored,
      // whatever the error policy, or every retry would replay it.
      if (running && id && options.storeErrors && !unavailable) {
        this.storeErrorResponse(response, id, options, error, attempt);
      }
      throw this.answer(
        response,
        unavailable
          ? new IdempotencyUnavailableException(options.retryAfter)
          : error,
      );
    }
  }

  /** Completes the transaction of a handler that returned `outcome`. */
  private async finish(
    response: HttpResponse,
    queryRunner: QueryRunner,
    options: ResolvedRouteOptions,
    attempt: Attempt,
    outcome: unknown,
  ): Promise<void> {
    const raw = rawResponse(response);
    const id = identity(attempt);
    if (raw.headersSent) {
      // Sent by the handler itself (@Res()): nothing can be stored to replay.
      throw new IdempotencyConfigurationError(
        'An @Idempotent() handler sent its response itself, so it cannot be replayed; its writes were rolled back.',
        'Return the body from the handler instead of using @Res(), or use @Res({ passthrough: true }).',
      );
    }
    if (isStream(outcome)) {
      // A stream is sent as it is read: commit first, and mark the key so
      // that a duplicate is refused rather than run again.
      const status =
        (response as { statusCode?: number }).statusCode ?? raw.statusCode;
      try {
        if (id) {
          await this.store.complete(
            queryRunner,
            id,
            'not_replayable',
            { status },
            options.ttlMs,
          );
        }
        await this.store.commit(queryRunner);
      } catch (error) {
        // Nothing of the stream was sent: the client gets a 503 to retry, as
        // for any other response whose transaction could not commit.
        this.engine.emit('failed', attempt, { error });
        throw new IdempotencyUnavailableException(options.retryAfter);
      }
      this.engine.emit('executed', attempt, { status });
      return;
    }
    this.commitWithResponse(
      response,
      queryRunner,
      options,
      attempt,
      async (captured) => {
        if (!id) {
          return;
        }
        if (captured.body.length > options.maxResponseSize) {
          this.logger.warn(
            `Response of ${id.method} ${id.path} (${captured.body.length} bytes) exceeds maxResponseSize (${options.maxResponseSize}): key ${JSON.stringify(id.key)} is not replayable`,
          );
          await this.store.complete(
            queryRunner,
            id,
            'not_replayable',
            { status: captured.status },
            options.ttlMs,
          );
          return;
        }
        await this.store.complete(
          queryRunner,
          id,
          'completed',
          toStored(captured, options),
          options.ttlMs,
        );
      },
    );
  }

  /**
   * Stores the error response the client gets (after exception filters), if
   * the error policy says so, in a transaction of its own.
   */
  private storeErrorResponse(
    response: HttpResponse,
    id: RequestIdentity,
    options: ResolvedRouteOptions,
    error: unknown,
    attempt: Attempt,
  ): void {
    const raw = rawResponse(response);
    const policy = options.storeErrors;
    if (!policy || raw.headersSent) {
      return;
    }
    holdResponse(
      raw,
      async (captured) => {
        if (
          !policy(captured.status, error) ||
          captured.body.length > options.maxResponseSize
        ) {
          return;
        }
        try {
          await this.store.storeError(
            id,
            toStored(captured, options),
            options.ttlMs,
          );
          this.engine.emit('stored-error', attempt, {
            status: captured.status,
          });
        } catch (failure) {
          // The client still gets its error; a retry runs again.
          this.logger.error(
            `Could not store an error response: ${(failure as Error).message}`,
          );
        }
      },
      () => {
        throw new Error('unreachable: storing an error response never rejects');
      },
    );
  }

  /**
   * Lets the platform serialize the handler's result, then runs `store` with
   * the bytes it is about to send and commits, before anything reaches the
   * client. A response that ends as a server error, or a client that leaves
   * before the response is written, rolls everything back instead.
   */
  private commitWithResponse(
    response: HttpResponse,
    queryRunner: QueryRunner,
    options: ResolvedRouteOptions,
    attempt: Attempt,
    store: (captured: CapturedResponse) => Promise<void>,
  ): void {
    const raw = rawResponse(response);
    let settled = false;
    const abandon = () => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        raw.removeListener('close', abandon);
        void this.store.rollback(queryRunner);
      }
    };
    // The response may never be written (the client left, or the platform
    // gave up on it): the connection still goes back to the pool.
    const timer = setTimeout(abandon, options.transactionTimeoutMs).unref();
    if (raw.destroyed) {
      abandon();
      return;
    }
    raw.once('close', abandon);
    holdResponse(
      raw,
      async (captured) => {
        if (settled) {
          return;
        }
        settled = true;
        clearTimeout(timer);
        raw.removeListener('close', abandon);
        if (captured.status >= 500) {
          await this.store.rollback(queryRunner);
          return;
        }
        try {
          await store(captured);
        } catch (error) {
          await this.store.rollback(queryRunner);
          throw error;
        }
        await this.store.commit(queryRunner);
        this.engine.emit('executed', attempt, { status: captured.status });
      },
      (error) => {
        this.engine.emit(
          isDatabaseTimeout(error, attempt, options) ? 'timeout' : 'failed',
          attempt,
          {
            error,
          },
        );
        const failure = new IdempotencyUnavailableException(options.retryAfter);
        const body = Buffer.from(JSON.stringify(failure.getProblem()));
        return {
          status: failure.getStatus(),
          headers: {
            'content-type': 'application/problem+json',
            'content-length': String(body.length),
            'retry-after': String(options.retryAfter),
          },
          body,
        };
      },
    );
  }

  /** Sets the headers of one of the module's own answers, and returns it. */
  private answer(response: HttpResponse, error: unknown): unknown {
    if (error instanceof IdempotencyHttpException) {
      const adapter = this.adapterHost.httpAdapter;
      adapter.setHeader(response, 'Content-Type', 'application/problem+json');
      for (const [name, value] of Object.entries(error.headers)) {
        adapter.setHeader(response, name, value);
      }
    }
    return error;
  }

  /**
   * The answer to a duplicate of a finished request: the stored response, as
   * a web `Response` that Nest sends as it is, or a refusal.
   */
  private replay(
    id: RequestIdentity,
    record: StoredRecord,
    attempt: Attempt,
  ): Response {
    if (!this.engine.sameRequest(record, attempt)) {
      this.engine.emit('mismatch', attempt, { status: 422 });
      throw new IdempotencyKeyReusedException(id.key);
    }
    if (record.status === 'not_replayable') {
      this.engine.emit('not-replayable', attempt, { status: 422 });
      throw new IdempotencyNotReplayableException(id.key);
    }
    this.engine.emit('replayed', attempt, { status: record.response.status });
    const stored = record.response;
    const headers = new Headers();
    for (const [name, value] of Object.entries(stored.headers)) {
      for (const item of Array.isArray(value) ? value : [value]) {
        headers.append(name, item);
      }
    }
    headers.set(IDEMPOTENT_REPLAYED_HEADER, 'true');
    // A 204 or 304 has no body, and must not announce one.
    if (stored.status !== 204 && stored.status !== 304) {
      headers.set('content-length', String(stored.body.length));
    }
    return new Response(
      stored.body.length > 0 ? new Uint8Array(stored.body) : null,
      {
        status: stored.status,
        headers,
      },
    );
  }
}

function rawResponse(response: HttpResponse): ServerResponse {
  return (response.raw ?? response) as ServerResponse;
}

function toStored(
  captured: CapturedResponse,
  options: ResolvedRouteOptions,
): StoredResponse {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(captured.headers)) {
    const replayed =
      name === 'content-type' ||
      (!UNSAFE_HEADERS.has(name) &&
        !options.replayDeny.has(name) &&
        (options.replayAllow === undefined || options.replayAllow.has(name)));
    if (replayed) {
      headers[name] = value;
    }
  }
  return { status: captured.status, headers, body: captured.body };
}
