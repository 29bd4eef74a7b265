import {
  Inject,
  Injectable,
  Logger,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { PATH_METADATA } from '@nestjs/common/constants.js';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { defer, lastValueFrom, type Observable } from 'rxjs';
import type { QueryRunner } from 'typeorm';
import {
  IDEMPOTENT_METADATA,
  IDEMPOTENT_REPLAYED_HEADER,
  UNSAFE_REPLAY_HEADERS,
} from './idempotency.constants.js';
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
import { IdempotencyConflictException } from './exceptions/idempotency-conflict.exception.js';
import { IdempotencyKeyReusedException } from './exceptions/idempotency-key-reused.exception.js';
import { IdempotencyUnavailableException } from './exceptions/idempotency-unavailable.exception.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import {
  IdempotencyStore,
  type RequestIdentity,
  type StoredResponse,
} from './store/idempotency.store.js';
import { ambientTransactions } from './store/ambient-transaction.js';
import {
  holdResponse,
  type CapturedResponse,
} from './http/response-capture.js';
import { requestFingerprint } from './http/request-fingerprint.js';

/** What the interceptor knows of a decorated handler, computed once. */
interface DecoratedRoute {
  readonly options: ResolvedRouteOptions;
  /** Route template, e.g. `/payments/:id`. */
  readonly path: string;
}

type HttpRequest = IncomingMessage & { body?: unknown; raw?: IncomingMessage };
type HttpResponse = { raw?: ServerResponse } & object;

const VISIBLE_ASCII_KEY = /^[\x21-\x7e]{1,255}$/;
const UNSAFE_HEADERS = new Set(UNSAFE_REPLAY_HEADERS);

function joinPaths(...parts: unknown[]): string {
  const segments = parts
    .flatMap((part) => (Array.isArray(part) ? part.slice(0, 1) : [part]))
    .filter((part): part is string => typeof part === 'string')
    .map((part) => part.replace(/^\/+|\/+$/g, ''))
    .filter((part) => part.length > 0);
  return `/${segments.join('/')}`;
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
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') {
      return next.handle();
    }
    const route = this.route(context);
    if (!route) {
      return next.handle();
    }
    return defer(() => this.execute(context, next, route));
  }

  /**
   * The idempotency key of a request, or `undefined` when it carries none.
   * Override to take the key from elsewhere.
   * @throws IdempotencyKeyInvalidException for a malformed key.
   */
  protected extractKey(request: IncomingMessage): string | undefined {
    const value = request.headers[this.options.headerField];
    if (value === undefined) {
      return undefined;
    }
    if (typeof value !== 'string') {
      throw new IdempotencyKeyInvalidException(
        this.options.headerName,
        'it is repeated',
      );
    }
    // A structured-field string ("...") carries the same key as the token.
    const key =
      value.length >= 2 && value.startsWith('"') && value.endsWith('"')
        ? value.slice(1, -1)
        : value;
    if (!VISIBLE_ASCII_KEY.test(key)) {
      throw new IdempotencyKeyInvalidException(
        this.options.headerName,
        'it must be 1 to 255 visible ASCII characters',
      );
    }
    return key;
  }

  /** The scope of a request. Override to derive it differently. */
  protected async resolveScope(
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
   * Fingerprint of a request: sha256 of its method, route template and
   * canonical body. Override to include or exclude parts of the request.
   */
  protected fingerprint(request: HttpRequest, routePath: string): string {
    return requestFingerprint(request.method ?? 'GET', routePath, request.body);
  }

  private route(context: ExecutionContext): DecoratedRoute | null {
    const handler = context.getHandler();
    let route = this.routes.get(handler);
    if (route === undefined) {
      const options = this.reflector.getAllAndOverride<
        IdempotentOptions | undefined
      >(IDEMPOTENT_METADATA, [handler, context.getClass()]);
      route = options
        ? {
            options: resolveRouteOptions(this.options, options),
            path: joinPaths(
              Reflect.getMetadata(PATH_METADATA, context.getClass()),
              Reflect.getMetadata(PATH_METADATA, handler),
            ),
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
    const http = context.switchToHttp();
    const request = http.getRequest<HttpRequest>();
    const response = http.getResponse<HttpResponse>();
    const { options } = route;
    let key: string | undefined;
    try {
      key = this.extractKey(request.raw ?? request);
      if (key === undefined && options.required) {
        throw new IdempotencyKeyMissingException(this.options.headerName);
      }
    } catch (error) {
      throw this.answer(response, error);
    }
    const scope = await this.resolveScope(context, options);
    let queryRunner: QueryRunner;
    try {
      queryRunner = await this.store.begin();
    } catch (error) {
      this.logger.error(
        `Could not begin a transaction: ${(error as Error).message}`,
      );
      throw this.answer(
        response,
        new IdempotencyUnavailableException(options.retryAfter),
      );
    }
    try {
      if (key === undefined) {
        await this.store.bound(queryRunner, options.transactionTimeoutMs);
        const outcome = await this.runHandler(
          next,
          queryRunner,
          scope,
          undefined,
        );
        this.commitWithResponse(
          response,
          queryRunner,
          options,
          async () => undefined,
        );
        return outcome;
      }
      const id: RequestIdentity = {
        scope,
        key,
        fingerprint: this.fingerprint(request, route.path),
        method: request.method ?? 'GET',
        path: route.path,
      };
      const record = await this.claim(queryRunner, id, options).catch(
        (error: unknown) => {
          if (error instanceof IdempotencyHttpException) {
            throw error;
          }
          this.logger.error(
            `Could not claim an idempotency key: ${(error as Error).message}`,
          );
          throw new IdempotencyUnavailableException(options.retryAfter);
        },
      );
      if (record) {
        await this.store.rollback(queryRunner);
        if (record.fingerprint !== id.fingerprint) {
          throw new IdempotencyKeyReusedException(key);
        }
        this.logger.debug(
          `Replayed ${id.method} ${id.path} (scope ${scope}, key ${key})`,
        );
        return this.replay(record.response);
      }
      const outcome = await this.runHandler(next, queryRunner, scope, key);
      if (rawResponse(response).headersSent) {
        // Sent by the handler itself (@Res()): nothing can be stored to replay.
        throw new IdempotencyConfigurationError(
          `${id.method} ${id.path} sent its response itself, so it cannot be replayed; its writes were rolled back.`,
          'Return the body from the handler instead of using @Res(), or use @Res({ passthrough: true }).',
        );
      }
      this.commitWithResponse(response, queryRunner, options, (captured) =>
        this.store.complete(queryRunner, id, toStored(captured)),
      );
      return outcome;
    } catch (error) {
      await this.store.rollback(queryRunner);
      throw this.answer(response, error);
    }
  }

  /**
   * Claims the key of a request.
   * @returns the completed record to replay, or `undefined` once this
   * transaction owns the key.
   */
  private async claim(
    queryRunner: QueryRunner,
    id: RequestIdentity,
    options: ResolvedRouteOptions,
  ) {
    let claim = await this.store.claim(
      queryRunner,
      id,
      options.ttlMs,
      options.transactionTimeoutMs,
    );
    if (claim.state === 'busy' && options.concurrency === 'wait') {
      if (
        await this.store.waitForLock(queryRunner, id, options.waitTimeoutMs)
      ) {
        claim = await this.store.claim(
          queryRunner,
          id,
          options.ttlMs,
          options.transactionTimeoutMs,
        );
      }
    }
    switch (claim.state) {
      case 'claimed':
        return undefined;
      case 'completed':
        return claim.record;
      case 'busy':
        this.logger.debug(
          `Conflict on ${id.method} ${id.path} (scope ${id.scope}, key ${id.key})`,
        );
        throw new IdempotencyConflictException(id.key, options.retryAfter);
    }
  }

  private runHandler(
    next: CallHandler,
    queryRunner: QueryRunner,
    scope: string,
    key: string | undefined,
  ): Promise<unknown> {
    return ambientTransactions.run(
      {
        dataSource: this.store.source,
        queryRunner,
        manager: queryRunner.manager,
        scope,
        key,
      },
      () => lastValueFrom(next.handle(), { defaultValue: undefined }),
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
      },
      (error) => {
        this.logger.error(
          `Could not commit an idempotent request: ${(error as Error).message}`,
          (error as Error).stack,
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

  /** The stored response, as a web `Response` that Nest sends as it is. */
  private replay(stored: StoredResponse): Response {
    const headers = new Headers();
    for (const [name, value] of Object.entries(stored.headers)) {
      for (const item of Array.isArray(value) ? value : [value]) {
        headers.append(name, item);
      }
    }
    headers.set(IDEMPOTENT_REPLAYED_HEADER, 'true');
    headers.set('content-length', String(stored.body.length));
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

function toStored(captured: CapturedResponse): StoredResponse {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(captured.headers)) {
    if (!UNSAFE_HEADERS.has(name)) {
      headers[name] = value;
    }
  }
  return { status: captured.status, headers, body: captured.body };
}
