import {
  HttpStatus,
  Inject,
  Injectable,
  Logger,
  Optional,
  type CallHandler,
  type ExecutionContext,
} from '@nestjs/common';
import { ApplicationConfig, HttpAdapterHost } from '@nestjs/core';
import { lastValueFrom } from 'rxjs';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import {
  IdempotencyHttpException,
  type IdempotencyProblem,
} from '../exceptions/idempotency-http.exception.js';
import { TransactionAbortedError } from '../core/transaction.errors.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import { IdempotencyBodyUnreadableException } from '../exceptions/idempotency-body-unreadable.exception.js';
import type { DecoratedRoute } from '../idempotency.routes.js';
import { newAttempt, type Attempt } from '../core/attempt.js';
import {
  IdempotencyExecutor,
  type Beginning,
} from '../core/idempotency.executor.js';
import type { Execution } from '../core/execution.js';
import type { StoredRecord } from '../interfaces/idempotency-store.interface.js';
import {
  holdResponse,
  sendInPlaceOfEmpty,
  type CapturedResponse,
} from './response-capture.js';
import { keySource, requestKey } from './idempotency-key.js';
import { isThenable } from '../core/is-thenable.js';
import { asksRetryLater, failsAttempt } from '../core/failures.js';
import {
  BODY_OMITTED_HEADER,
  fingerprintParts,
  isStream,
  rawResponse,
  removeHeader,
  toStored,
  type HttpRequest,
  type HttpResponse,
} from './http-messages.js';

/**
 * @internal The HTTP adapter of the request sequence: turns a request into
 * an attempt (its key from the key header or the `key` option, its scope,
 * its fingerprint), and the outcome back into a response: the handler's,
 * committed before it is sent, or the stored one replayed, or a refusal.
 */
@Injectable()
export class IdempotencyHttp {
  /** The replay header, lower-cased as stored headers are. */
  private readonly replayedField: string;
  /** The key header: its name, and its field (lower-cased). */
  private readonly keyHeader: { readonly name: string; readonly field: string };
  private readonly logger = new Logger('Idempotency');
  /** The routes whose handler sent its response itself, told once each. */
  private readonly sentItself = new Set<string>();

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly executor: IdempotencyExecutor,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
    /** The application's global prefix, left out of matched routes. */
    @Optional() private readonly appConfig?: ApplicationConfig,
  ) {
    this.replayedField = options.replayHeaderName.toLowerCase();
    this.keyHeader = { name: options.headerName, field: options.headerField };
  }

  /**
   * The idempotency key of a request, or `undefined` when it carries none:
   * the `key` option's resolver, else the key header (a token or a quoted
   * sf-string). A promise only when the resolver returns one.
   * @throws IdempotencyKeyInvalidException for a malformed or repeated key.
   */
  private resolveKey(
    context: ExecutionContext,
    options: ResolvedRouteOptions,
    request: HttpRequest,
  ): string | undefined | Promise<string | undefined> {
    return requestKey(context, options, this.keyHeader, request.raw ?? request);
  }

  /** Runs a decorated handler, or answers for it. */
  async execute(
    context: ExecutionContext,
    next: CallHandler,
    route: DecoratedRoute,
  ): Promise<unknown> {
    const started = Date.now();
    // The HTTP arguments, read as switchToHttp() would (which sets three
    // functions on the context each time it is called).
    const request = context.getArgByIndex<HttpRequest>(0);
    const response = context.getArgByIndex<HttpResponse>(1);
    const { options } = route;
    let attempt: Attempt;
    try {
      const key = this.resolveKey(context, options, request);
      const { keyField, keyLocation } = keySource(
        options,
        this.options.headerName,
      );
      attempt = await newAttempt(context, options, {
        started,
        key: isThenable(key) ? await key : key,
        keyField,
        keyLocation,
        parts: fingerprintParts(
          request,
          route.path,
          this.appConfig?.getGlobalPrefix(),
          route.variant,
        ),
        legacy: true,
      });
    } catch (error) {
      if (error instanceof IdempotencyBodyUnreadableException) {
        this.executor.warn(
          error.files
            ? `A request to ${route.path} was refused (415): its files were read apart from its body (by a middleware such as Multer's), so they cannot be fingerprinted. Give the route a fingerprint function (of a digest of the files the client sends, such as Content-Digest).`
            : `A request to ${route.path} was refused (415): its body has no parser in the application, so it cannot be fingerprinted. Register a body parser for its content type (on Express, app.useBodyParser('text') or 'raw'; Fastify refuses unknown content types itself), or give the route a fingerprint function.`,
          `unreadable-body ${route.path}`,
        );
      }
      throw this.answer(response, error);
    }
    let beginning: Beginning;
    try {
      beginning = await this.executor.begin(attempt, options);
    } catch (error) {
      throw this.answer(response, error);
    }
    if ('replay' in beginning) {
      try {
        return this.replay(response, beginning.replay, attempt);
      } catch (error) {
        throw this.answer(response, error);
      }
    }
    const { execution } = beginning;
    const expires = this.options.expiresHeaderName;
    if (expires !== undefined && attempt.key !== undefined) {
      // Set before the handler runs: stored with the response, a replay
      // carries it unchanged. The record itself expires `ttl` after its
      // claim (a little later), or after its completion for a handler that
      // outlived its ttl (set again then, see finish()).
      this.adapterHost.httpAdapter.setHeader(
        response,
        expires,
        new Date(attempt.started + options.ttlMs).toUTCString(),
      );
    }
    let outcome: unknown;
    try {
      outcome = await execution.run(() =>
        lastValueFrom(next.handle(), { defaultValue: undefined }),
      );
    } catch (error) {
      // The error response may be stored, by the error policy, once the
      // exception filters have made it.
      const storing =
        options.storeErrors !== undefined && attempt.key !== undefined;
      const kind = await execution.fail(error, { keepClaim: storing });
      if (storing && kind === 'handler') {
        this.storeErrorResponse(response, execution, error);
      } else if (expires !== undefined) {
        // The key is free again: no record expires then.
        removeHeader(response, expires);
      }
      throw this.answer(
        response,
        kind === 'handler'
          ? error
          : new IdempotencyUnavailableException(options.retryAfter),
      );
    }
    try {
      await this.finish(response, execution, outcome);
    } catch (error) {
      throw this.answer(response, error);
    }
    return outcome;
  }

  /** Says once per route that its handler sends its response itself. */
  private warnSentItself(execution: Execution): void {
    const { method, path } = execution.attempt;
    const route = `${method} ${path}`;
    if (!this.sentItself.has(route)) {
      this.sentItself.add(route);
      this.logger.warn(
        `The @Idempotent() handler of ${route} sends its response itself (@Res({ passthrough: true })): it was sent before the commit, and a duplicate gets its status without its body. Return the body (or use @Redirect()) instead, for a response sent once the request is committed and replayed as it was.`,
      );
    }
  }

  /** Completes the execution of a handler that returned `outcome`. */
  private async finish(
    response: HttpResponse,
    execution: Execution,
    outcome: unknown,
  ): Promise<void> {
    const raw = rawResponse(response);
    const { options } = execution;
    if (raw.headersSent) {
      // Sent by the handler itself, under @Res({ passthrough: true }) (a
      // redirect, `res.json()`): the client has its answer already, which
      // says the request was done. Its writes commit, as that answer says
      // (rolled back, every retry would be answered so again, for writes
      // that never are); what was sent cannot be stored, so the key is
      // marked as a stream's is. An error it sent (a 4xx or 5xx) said the
      // request was not done: rolled back, the key free, as when thrown.
      // Its headers are out already: an `expiresHeader` set before the
      // handler ran went with it (the one exception, documented).
      const status = raw.statusCode;
      if (status >= 400) {
        await execution.fail(new Error(`The response is a ${status}`));
        return;
      }
      this.warnSentItself(execution);
      await execution.completeUnreplayable(status);
      return;
    }
    if (isStream(outcome)) {
      // A stream is sent as it is read: commit first, and mark the key so
      // that a duplicate is refused rather than run again. Nothing of the
      // stream was sent when this fails: the client gets a 503 to retry.
      // A web Response is sent with its own status, not the route's.
      const status =
        outcome instanceof Response
          ? outcome.status
          : ((response as { statusCode?: number }).statusCode ??
            raw.statusCode);
      // The headers it goes out with, read for an error only: those set on
      // the platform's response (Fastify's reply keeps its own until
      // sent), and a web Response's.
      const headers = () =>
        ({
          ...((
            response as { getHeaders?: () => Record<string, unknown> }
          ).getHeaders?.() ?? raw.getHeaders()),
          ...(outcome instanceof Response
            ? Object.fromEntries(outcome.headers)
            : undefined),
        }) as Record<string, string>;
      if (
        failsAttempt(status) ||
        (status >= 400 && asksRetryLater(status, headers()))
      ) {
        // As any 5xx, or a come back later (a 408, 425 or 429, a
        // `Retry-After` on an error): rolled back, nothing stored, the
        // retry runs, as for an answer returned whole. The key is free
        // again: no record expires then (nothing of the stream is sent
        // yet).
        const expires = this.options.expiresHeaderName;
        if (expires !== undefined) {
          removeHeader(response, expires);
        }
        await execution.fail(new Error(`The response is a ${status}`));
        return;
      }
      if (raw.destroyed && this.executor.store.completesInTransaction) {
        // The client left before any of it was sent: rolled back, the key
        // free for its retry, as for an answer the module writes. (On any
        // other store the handler's effects stay: marked as below.)
        await execution.fail(new Error('The response was never written'));
        return;
      }
      await execution.completeUnreplayable(status);
      return;
    }
    const expires = this.options.expiresHeaderName;
    const { attempt } = execution;
    if (
      expires !== undefined &&
      attempt.key !== undefined &&
      Date.now() > attempt.started + options.ttlMs
    ) {
      // A handler that outlived its ttl: its record is kept ttl from its
      // completion, not from the request's arrival (already past).
      this.adapterHost.httpAdapter.setHeader(
        response,
        expires,
        new Date(Date.now() + options.ttlMs).toUTCString(),
      );
    }
    // The status the route (or the handler, through `res.status()`) chose,
    // before the platform sends the result.
    const chosen =
      (response as { statusCode?: number }).statusCode ?? raw.statusCode;
    this.commitWithResponse(response, execution, chosen, async (captured) => {
      if (
        captured.status >= 500 &&
        chosen < 500 &&
        !this.executor.store.completesInTransaction
      ) {
        // The handler returned, and its answer failed before it was sent:
        // a result the platform cannot serialize (a cycle, a BigInt), an
        // interceptor outside the module's that threw on it. Its effects
        // happened, and on this store they stay: a retry must not run it
        // again, so its duplicates get this status replayed without a
        // body. (Where the store completes in the handler's transaction,
        // its writes roll back with the record below, and the retry runs.)
        await execution.completeUnreplayable(captured.status);
        return undefined;
      }
      if (
        failsAttempt(captured.status) ||
        (captured.status >= 400 &&
          asksRetryLater(captured.status, captured.headers))
      ) {
        // A 5xx, or an error answer that asks to come back later (a 408,
        // 425 or 429, a `Retry-After`) set on a returned answer
        // (`@HttpCode()`, `res.status()`): as thrown, never stored. The
        // key is free again: no record expires then.
        await execution.fail(new Error(`The response is a ${captured.status}`));
        return expires === undefined ? undefined : [expires];
      }
      await execution.completeWith(toStored(captured, options));
      return undefined;
    });
  }

  /**
   * Stores the error response the client gets (after exception filters), if
   * the error policy says so; otherwise releases the key.
   */
  private storeErrorResponse(
    response: HttpResponse,
    execution: Execution,
    error: unknown,
  ): void {
    const raw = rawResponse(response);
    const { options } = execution;
    const policy = options.storeErrors;
    if (!policy || raw.headersSent || raw.destroyed) {
      void execution.release();
      return;
    }
    // The response may never be written: the key is freed all the same.
    execution.awaitResponse(() => void execution.release());
    holdResponse(
      raw,
      async (captured) => {
        if (
          execution.storesError(captured.status, error) &&
          captured.body.length <= options.maxResponseSize &&
          // Read before `replayHeaders` keeps what it keeps of them.
          !asksRetryLater(captured.status, captured.headers, error)
        ) {
          await execution.storeError(toStored(captured, options), error);
          return undefined;
        }
        await execution.release();
        // The key is free again: no record expires then.
        const expires = this.options.expiresHeaderName;
        return expires === undefined ? undefined : [expires];
      },
      () => {
        throw new Error('unreachable: storing an error response never rejects');
      },
    );
  }

  /**
   * Lets the platform serialize the handler's result, then runs `settle` with
   * the bytes it is about to send (it completes and commits), before
   * anything reaches the client; the headers it names go out of the
   * response. Where the store completes in the handler's transaction, a
   * client that leaves before the response is written rolls everything
   * back instead. On any other store the handler's effects stay whatever
   * the client does: the response is stored all the same (the platform
   * still writes it), or, if it never comes, the key is kept as not
   * replayable with the status the route chose (`status`).
   */
  private commitWithResponse(
    response: HttpResponse,
    execution: Execution,
    status: number,
    settle: (captured: CapturedResponse) => Promise<void | readonly string[]>,
  ): void {
    const raw = rawResponse(response);
    const { options } = execution;
    const rollsBack = this.executor.store.completesInTransaction;
    let settled = false;
    const abandon = () => {
      if (!settled) {
        settled = true;
        raw.removeListener('close', abandon);
        void (rollsBack
          ? execution.fail(new Error('The response was never written'))
          : execution.completeUnreplayable(status).catch(() => undefined));
      }
    };
    // The response may never be written (the client left, or the platform
    // gave up on it): the connection still goes back to the pool.
    execution.awaitResponse(abandon);
    if (rollsBack) {
      if (raw.destroyed) {
        abandon();
        return;
      }
      raw.on('close', abandon);
    }
    holdResponse(
      raw,
      async (captured) => {
        if (settled) {
          return;
        }
        settled = true;
        raw.removeListener('close', abandon);
        return settle(captured);
      },
      (error) => {
        if (error instanceof TransactionAbortedError) {
          // The handler's error, past the exception filters: logged and
          // answered as an error of the handler's would be, its detail kept
          // from the client.
          this.logger.error(
            `${execution.attempt.method} ${execution.attempt.path}: ${error.message}`,
          );
          return problemResponse({
            type: 'about:blank',
            title: 'Internal Server Error',
            status: HttpStatus.INTERNAL_SERVER_ERROR,
            detail: 'The request failed, and nothing of it was committed.',
          });
        }
        const failure = new IdempotencyUnavailableException(
          options.retryAfter,
        ).withTypeBase(this.options.problemTypeBaseUrl);
        return problemResponse(failure.getProblem(), {
          'retry-after': String(options.retryAfter),
        });
      },
    );
  }

  /**
   * Sets the headers of one of the module's own answers, points its problem
   * type at `problemTypeBaseUrl`, and returns it.
   */
  private answer(response: HttpResponse, error: unknown): unknown {
    if (error instanceof IdempotencyHttpException) {
      error.withTypeBase(this.options.problemTypeBaseUrl);
      const adapter = this.adapterHost.httpAdapter;
      adapter.setHeader(response, 'Content-Type', 'application/problem+json');
      for (const [name, value] of Object.entries(error.headers)) {
        adapter.setHeader(response, name, value);
      }
    }
    return error;
  }

  /**
   * The answer to a duplicate of a finished request: the stored response,
   * written by the platform as it sends the `undefined` this returns (one
   * write of the stored bytes, where a web `Response` would be streamed), or
   * a refusal. A response that was not stored (a stream, a body over
   * `maxResponseSize`) is answered with its status and an empty body marked
   * as omitted: a `422` would read as a reused key.
   */
  private replay(
    response: HttpResponse,
    record: StoredRecord,
    attempt: Attempt,
  ): undefined {
    const { response: stored, bodyOmitted } = this.executor.replayOrOmit(
      attempt,
      record,
    );
    const headers: Record<string, string | string[]> = { ...stored.headers };
    if (bodyOmitted) {
      headers[BODY_OMITTED_HEADER] = 'true';
    }
    headers[this.replayedField] = 'true';
    // A 204 or 304 has no body, and must not announce one.
    if (stored.status !== 204 && stored.status !== 304) {
      headers['content-length'] = String(stored.body.length);
    }
    sendInPlaceOfEmpty(rawResponse(response), {
      status: stored.status,
      headers,
      body: stored.body,
    });
    return undefined;
  }
}

/** The module's own answer of `problem`, with `headers` beside its own. */
function problemResponse(
  problem: IdempotencyProblem,
  headers: Record<string, string> = {},
): CapturedResponse {
  const body = Buffer.from(JSON.stringify(problem));
  return {
    status: problem.status,
    headers: {
      'content-type': 'application/problem+json',
      'content-length': String(body.length),
      ...headers,
    },
    body,
  };
}
