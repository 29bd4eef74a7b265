import {
  Inject,
  Injectable,
  type CallHandler,
  type ExecutionContext,
} from '@nestjs/common';
import type { IncomingMessage } from 'node:http';
import { lastValueFrom } from 'rxjs';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import type { DecoratedRoute } from '../idempotency.routes.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import { keySource, resolveRequestKey } from '../http/idempotency-key.js';
import { newAttempt, type Attempt } from '../core/attempt.js';
import {
  IdempotencyExecutor,
  jsonResponse,
  type Beginning,
} from '../core/idempotency.executor.js';
import type { Execution } from '../core/execution.js';
import type { StoredRecord } from '../interfaces/idempotency-store.interface.js';
import { toGraphqlError } from './graphql-refusals.js';
import { errorStatus, restoreError, storeError } from './stored-error.js';
import {
  RESULT_REVIVALS_HEADER,
  resultJson,
  reviveRecorded,
  reviveResult,
} from './stored-result.js';
import { messageOf } from '../core/error-message.js';

/** The method a mutation's record and events carry. */
const MUTATION_METHOD = 'MUTATION';

/** What the module reads of a resolver's `info` argument. */
interface ResolveInfo {
  readonly path?: ResponsePath;
  /** The field's type, by which its stored result is revived. */
  readonly returnType?: Parameters<typeof reviveResult>[1];
}

interface ResponsePath {
  readonly key: string | number;
  readonly prev: ResponsePath | undefined;
}

/**
 * What the module reads of the GraphQL context: the HTTP request, which
 * `@nestjs/apollo` (Express and Fastify) and `@nestjs/mercurius` put in
 * `req`; Mercurius also has it as `reply.request`.
 */
interface GraphqlContext {
  readonly req?: HttpRequest;
  readonly reply?: { readonly request?: HttpRequest };
}

/** An Express request, or a Fastify request with the Node.js one as `raw`. */
type HttpRequest = IncomingMessage & { readonly raw?: IncomingMessage };

/**
 * Where a field's result goes in the response (its alias, else its name):
 * `placeOrder`, or `first` for `first: placeOrder(...)`.
 */
function responsePath(info: ResolveInfo | undefined): string {
  const keys: Array<string | number> = [];
  for (let path = info?.path; path; path = path.prev) {
    keys.unshift(path.key);
  }
  return keys.join('.');
}

/**
 * The arguments as JSON has them: a custom scalar's value (a `Date`) by its
 * `toJSON()`, as the client sent it, rather than as an object without keys;
 * a `BigInt` by its digits. Every other value stays as the resolver gets it
 * (`-0` too, which JSON would write as `0`), for the fingerprint's
 * canonical JSON to tell apart what the resolver tells apart.
 */
function jsonArguments(args: unknown): unknown {
  if (typeof args === 'bigint') {
    return args.toString();
  }
  if (args === null || typeof args !== 'object') {
    return args;
  }
  const toJSON = (args as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    return jsonArguments((toJSON as () => unknown).call(args));
  }
  if (Array.isArray(args)) {
    return args.map(jsonArguments);
  }
  const fields: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(args)) {
    fields[name] = jsonArguments(value);
  }
  return fields;
}

/**
 * @internal `@Idempotent()` on GraphQL `@Mutation()` resolvers: the key
 * comes from the HTTP request's key header, and each field of a document
 * keeps a record of its own, under `<key>#<alias or field name>`, so that a
 * document with several decorated mutations runs each once and replays each
 * from its own record. The resolver runs in the shared transaction, its
 * result (as JSON) commits with its writes, and a duplicate gets that result
 * without running it. The module's refusals become `GraphQLError`s with the
 * problem details in `extensions`.
 */
@Injectable()
export class IdempotencyGraphql {
  constructor(
    private readonly executor: IdempotencyExecutor,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  async execute(
    context: ExecutionContext,
    next: CallHandler,
    route: DecoratedRoute,
  ): Promise<unknown> {
    const started = Date.now();
    const { options } = route;
    const [, args, graphqlContext, info] =
      context.getArgs<
        [unknown, unknown, GraphqlContext | undefined, ResolveInfo | undefined]
      >();
    let attempt: Attempt;
    let beginning: Beginning;
    try {
      attempt = await newAttempt(context, options, {
        started,
        key: await this.resolveKey(context, graphqlContext, options),
        ...keySource(options, this.options.headerName),
        keySuffix: `#${responsePath(info)}`,
        parts: {
          method: MUTATION_METHOD,
          route: route.path,
          params: {},
          query: [],
          body: jsonArguments(args ?? {}),
        },
      });
      beginning = await this.executor.begin(attempt, options);
    } catch (error) {
      throw await toGraphqlError(error, this.options.problemTypeBaseUrl);
    }
    if ('replay' in beginning) {
      return this.replay(beginning.replay, attempt, info);
    }
    return this.run(beginning.execution, next);
  }

  /**
   * The key of a mutation: the `key` option's resolver, else the HTTP
   * request's key header; `undefined` when it has none (a mutation over a
   * WebSocket has no headers).
   */
  private resolveKey(
    context: ExecutionContext,
    graphqlContext: GraphqlContext | undefined,
    options: ResolvedRouteOptions,
  ): Promise<string | undefined> {
    const request = graphqlContext?.req ?? graphqlContext?.reply?.request;
    const raw = request?.raw ?? request;
    return resolveRequestKey(
      context,
      options,
      { name: this.options.headerName, field: this.options.headerField },
      raw?.headers === undefined ? undefined : raw,
    );
  }

  /** Runs the resolver, and completes with its result or fails. */
  private async run(execution: Execution, next: CallHandler): Promise<unknown> {
    let result: unknown;
    let stored: ReturnType<typeof resultJson>;
    try {
      result = await execution.run(() =>
        lastValueFrom(next.handle(), { defaultValue: undefined }),
      );
    } catch (error) {
      throw await this.failed(execution, error);
    }
    try {
      stored = resultJson(result);
    } catch (error) {
      // A result JSON cannot hold (a cycle) is the resolver's error. Where
      // the store completes in the resolver's transaction, nothing of it
      // commits, and the key is free for the retry; on any other store its
      // effects stay, and a retry must not run it again: the key's
      // duplicates are refused as not replayable (as `run()` does).
      if (this.executor.store.completesInTransaction) {
        throw await this.failed(execution, error);
      }
      await execution.completeUnreplayable(jsonResponse(undefined).status);
      throw await toGraphqlError(error, this.options.problemTypeBaseUrl);
    }
    try {
      await execution.completeWith(
        jsonResponse(stored.json, {
          'content-type': 'application/json',
          ...(stored.revivals === undefined
            ? {}
            : { [RESULT_REVIVALS_HEADER]: stored.revivals }),
        }),
      );
    } catch (error) {
      throw await toGraphqlError(error, this.options.problemTypeBaseUrl);
    }
    return result;
  }

  /**
   * Ends an execution whose resolver threw: stores its error by the error
   * policy (or releases the key), and returns what the client gets.
   */
  private async failed(execution: Execution, error: unknown): Promise<unknown> {
    const { options } = execution;
    const policy = options.storeErrors;
    const storing = policy !== undefined && execution.lease !== undefined;
    const kind = await execution.fail(error, { keepClaim: storing });
    if (kind !== 'handler') {
      return toGraphqlError(
        new IdempotencyUnavailableException(options.retryAfter),
        this.options.problemTypeBaseUrl,
      );
    }
    // What the client gets, and so what a duplicate gets back: one of the
    // module's refusals that the resolver threw (a nested `run()`'s) as its
    // GraphQL error, with its code and problem details.
    const answer = await toGraphqlError(error, this.options.problemTypeBaseUrl);
    if (storing) {
      const status = errorStatus(error);
      let stored: ReturnType<typeof storeError> | null = null;
      try {
        stored = execution.storesError(status, error)
          ? storeError(answer, status)
          : null;
      } catch (failure) {
        // An error JSON cannot hold (a BigInt, a cycle in its response):
        // not stored, and the key is free.
        this.executor.warn(
          `The error of a mutation could not be stored (${messageOf(failure)}): its key is released`,
        );
      }
      if (stored && stored.body.length <= options.maxResponseSize) {
        await execution.storeError(stored, error);
      } else {
        await execution.release();
      }
    }
    return answer;
  }

  /**
   * The answer to a duplicate of a finished mutation: its stored result, its
   * stored error thrown again, or a refusal.
   */
  private async replay(
    record: StoredRecord,
    attempt: Attempt,
    info: ResolveInfo | undefined,
  ): Promise<unknown> {
    let response;
    try {
      response = this.executor.replay(attempt, record);
    } catch (error) {
      throw await toGraphqlError(error, this.options.problemTypeBaseUrl);
    }
    if (record.status === 'failed') {
      throw restoreError(response);
    }
    return response.body.length === 0
      ? undefined
      : reviveResult(
          reviveRecorded(
            JSON.parse(response.body.toString('utf8')) as unknown,
            response.headers[RESULT_REVIVALS_HEADER],
          ),
          info?.returnType,
        );
  }
}
