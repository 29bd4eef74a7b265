import { Inject, Injectable } from '@nestjs/common';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants.js';
import { RequestMethod } from '@nestjs/common/enums/request-method.enum.js';
import { Reflector } from '@nestjs/core';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import { HANDLER_METADATA, handlerKind } from './idempotency.handlers.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import {
  resolveRouteOptions,
  type ResolvedIdempotencyOptions,
} from './idempotency.options.js';
import type { ResolvedRouteOptions } from './core/executor.options.js';
import type { IdempotentOptions } from './interfaces/idempotency-options.interface.js';

/** @internal What the module knows of a decorated handler, resolved once. */
export interface DecoratedRoute {
  readonly options: ResolvedRouteOptions;
  /**
   * Route template, e.g. `/payments/:id`; for a GraphQL mutation, its type
   * and schema name, e.g. `Mutation.placeOrder`.
   */
  readonly path: string;
  /** Message pattern, for microservice handlers. */
  readonly pattern: string;
  /** Every message pattern of a microservice handler (as strings); none for a route. */
  readonly patterns: readonly string[];
  /** `<Class>.<method>`: the handler's name. */
  readonly handlerName: string;
}

/** A message pattern as a string: itself, or its JSON. */
function patternText(pattern: unknown): string {
  return typeof pattern === 'string' ? pattern : JSON.stringify(pattern);
}

/**
 * @internal The methods of reads, which must never be deduplicated (a
 * duplicate would get a stale answer), by name; `@All()` answers them too.
 */
const READ_METHODS: ReadonlyMap<unknown, string> = new Map([
  [RequestMethod.GET, 'GET'],
  [RequestMethod.HEAD, 'HEAD'],
  [RequestMethod.OPTIONS, 'OPTIONS'],
  [RequestMethod.ALL, 'ALL'],
]);

/**
 * @internal The read method (`GET`, `HEAD`, `OPTIONS`, or `ALL` for
 * `@All()`) that the route `handler` answers, or `undefined` for a route
 * that changes state (or a handler that is no route).
 */
export function readMethod(handler: object): string | undefined {
  return Reflect.getMetadata(PATH_METADATA, handler) === undefined
    ? undefined
    : READ_METHODS.get(Reflect.getMetadata(METHOD_METADATA, handler));
}

function joinPaths(...parts: unknown[]): string {
  const segments = parts
    .flatMap((part) => (Array.isArray(part) ? part.slice(0, 1) : [part]))
    .filter((part): part is string => typeof part === 'string')
    .map((part) => part.replace(/^\/+|\/+$/g, ''))
    .filter((part) => part.length > 0);
  return `/${segments.join('/')}`;
}

/** The route template of a handler, or `Mutation.<name>` of a mutation. */
function routePath(controller: object, handler: object): string {
  if (handlerKind(handler, true) === 'mutation') {
    const name = Reflect.getMetadata(HANDLER_METADATA.graphqlName, handler) as
      string | undefined;
    return `Mutation.${name ?? (handler as () => unknown).name}`;
  }
  return joinPaths(
    Reflect.getMetadata(PATH_METADATA, controller),
    Reflect.getMetadata(PATH_METADATA, handler),
  );
}

/**
 * @internal The decorated handlers of the application with their options
 * merged over the module's, resolved at bootstrap (by the explorer, which
 * also refuses invalid ones) so that no request resolves them.
 */
@Injectable()
export class IdempotencyRoutes {
  private readonly routes = new WeakMap<object, DecoratedRoute | null>();
  /** The decorated message handlers of each pattern. */
  private readonly patternHandlers = new Map<string, Set<object>>();

  constructor(
    private readonly reflector: Reflector,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  /**
   * The route of `handler` of `controller`, or `null` when it is not
   * decorated (a resolver class's decorator applies to its mutations
   * only, a controller's to its routes that are not reads). Handlers the explorer did not see (registered later) are
   * resolved on their first request.
   * @throws IdempotencyConfigurationError for invalid route options.
   */
  get(
    controller: abstract new (...args: never[]) => unknown,
    handler: (...args: never[]) => unknown,
  ): DecoratedRoute | null {
    let route = this.routes.get(handler);
    if (route === undefined) {
      const own = this.reflector.get<IdempotentOptions | undefined>(
        IDEMPOTENT_METADATA,
        handler,
      );
      // The explorer refuses a read decorated itself at bootstrap.
      const options =
        handlerKind(handler, true) === 'graphql' ||
        (!own && readMethod(handler) !== undefined)
          ? undefined
          : this.reflector.getAllAndOverride<IdempotentOptions | undefined>(
              IDEMPOTENT_METADATA,
              [handler, controller],
            );
      const patterns = Reflect.getMetadata(
        HANDLER_METADATA.messagePattern,
        handler,
      ) as unknown[] | undefined;
      const handlerName = `${controller.name}.${handler.name}`;
      const texts = (patterns ?? []).map(patternText);
      route = options
        ? {
            options: resolveRouteOptions(this.options, options),
            path: routePath(controller, handler),
            pattern: texts[0] ?? handlerName,
            patterns: texts,
            handlerName,
          }
        : null;
      for (const text of route ? texts : []) {
        const handlers = this.patternHandlers.get(text) ?? new Set();
        handlers.add(handler);
        this.patternHandlers.set(text, handlers);
      }
      this.routes.set(handler, route);
    }
    return route;
  }

  /**
   * Whether another decorated message handler listens to a pattern of
   * `route`'s: Nest hands each event to every handler of its pattern, so
   * each must keep records of its own. Complete once the explorer resolved
   * every handler at bootstrap.
   */
  sharesPattern(route: DecoratedRoute): boolean {
    return route.patterns.some(
      (pattern) => (this.patternHandlers.get(pattern)?.size ?? 0) > 1,
    );
  }
}
