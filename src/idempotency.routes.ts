import { Inject, Injectable } from '@nestjs/common';
import {
  HOST_METADATA,
  METHOD_METADATA,
  PATH_METADATA,
  VERSION_METADATA,
} from '@nestjs/common/constants.js';
import { RequestMethod } from '@nestjs/common/enums/request-method.enum.js';
import { Reflector } from '@nestjs/core';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import { canonicalJson } from './core/canonical-json.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
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
  /**
   * Every message pattern of a microservice handler, as Nest routes it (as
   * strings, an object's fields in sorted order); none for a route.
   */
  readonly patterns: readonly string[];
  /** Each of {@link patterns} as the handler declares it (its JSON). */
  readonly declared: readonly string[];
  /**
   * What tells an HTTP route apart from another of the same path beside
   * its path: its version(s) (`@Version()`, a controller's `version`: under
   * header, media-type or custom versioning, every version of a path is
   * one pattern) and its controller's `host`, as text; none for a route
   * without them.
   */
  readonly variant?: Readonly<Record<string, string>>;
}

/** A message handler the explorer saw, of one of its patterns. */
interface Listener {
  readonly pattern: string;
  /** `Class.method`. */
  readonly name: string;
  /** Whether it carries `@Idempotent()` (keeps records of its own). */
  readonly decorated: boolean;
  /** Whether it handles events (`@EventPattern()`). */
  readonly event: boolean;
  /** Whether it is decorated with `acknowledge: true`. */
  readonly acknowledges: boolean;
  /** The transport it names, if any (else every one). */
  readonly transport: unknown;
}

/** A version or host of a route's metadata, as text. */
function metadataText(value: unknown): string {
  const values: unknown[] = Array.isArray(value) ? value : [value];
  return values
    .map((entry) =>
      typeof entry === 'symbol'
        ? (entry.description ?? 'symbol')
        : String(entry),
    )
    .join(',');
}

/** The {@link DecoratedRoute.variant} of `handler` of `controller`. */
function routeVariant(
  controller: abstract new (...args: never[]) => unknown,
  handler: (...args: never[]) => unknown,
): Readonly<Record<string, string>> | undefined {
  const version: unknown =
    Reflect.getMetadata(VERSION_METADATA, handler) ??
    Reflect.getMetadata(VERSION_METADATA, controller);
  const host: unknown = Reflect.getMetadata(HOST_METADATA, controller);
  if (version === undefined && host === undefined) {
    return undefined;
  }
  return {
    ...(version === undefined ? {} : { '@version': metadataText(version) }),
    ...(host === undefined ? {} : { '@host': metadataText(host) }),
  };
}

/** A message pattern as a string: itself, or its JSON. */
function patternText(pattern: unknown): string {
  return typeof pattern === 'string' ? pattern : JSON.stringify(pattern);
}

/**
 * A message pattern as Nest routes it, as a string: an object pattern's
 * fields in sorted order, so that `{ entity, action }` and
 * `{ action, entity }`, which Nest hands the same messages, are one
 * pattern.
 */
function patternRoute(pattern: unknown): string {
  return typeof pattern === 'string' ? pattern : canonicalJson(pattern);
}

/** `Transport.REDIS` and `Transport.NATS` of @nestjs/microservices. */
const REDIS = 1;
const NATS = 2;

/**
 * @internal A message pattern received as text (an object pattern as its
 * JSON, its fields in its client's order) as Nest routes it (see
 * {@link patternRoute}).
 */
export function receivedPatternRoute(text: string): string {
  if (!text.startsWith('{')) {
    return text;
  }
  try {
    return patternRoute(JSON.parse(text));
  } catch {
    return text;
  }
}

/**
 * Whether a NATS subject could match both patterns: tokens between dots,
 * `*` any one token, `>` (last) one or more.
 */
function natsOverlap(a: readonly string[], b: readonly string[]): boolean {
  for (let i = 0; ; i += 1) {
    if (i === a.length || i === b.length) {
      return a.length === b.length;
    }
    if (a[i] === '>' || b[i] === '>') {
      return true;
    }
    if (a[i] !== b[i] && a[i] !== '*' && b[i] !== '*') {
      return false;
    }
  }
}

/** The glob characters of a Redis pattern subscription (`PSUBSCRIBE`). */
const REDIS_GLOB = /[*?[\\]/;

/** A Redis glob pattern as a regular expression of the channels it matches. */
function redisGlob(pattern: string): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i += 1) {
    const char = pattern[i];
    if (char === '*') {
      source += '[\\s\\S]*';
    } else if (char === '?') {
      source += '[\\s\\S]';
    } else if (char === '\\' && i + 1 < pattern.length) {
      i += 1;
      source += pattern[i].replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
    } else if (char === '[') {
      // A class: loosely any character, so that overlap errs towards yes.
      const end = pattern.indexOf(']', i + 1);
      source += '[\\s\\S]';
      i = end === -1 ? pattern.length : end;
    } else {
      source += char.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
    }
  }
  return new RegExp(`^${source}$`);
}

/**
 * Whether a Redis channel could match both patterns, with `wildcards` (the
 * server's `PSUBSCRIBE`). Two globs are taken to overlap unless their
 * literal beginnings or ends tell them apart: it errs towards yes.
 */
function redisOverlap(a: string, b: string): boolean {
  const aGlob = REDIS_GLOB.test(a);
  const bGlob = REDIS_GLOB.test(b);
  if (!aGlob || !bGlob) {
    return aGlob ? redisGlob(a).test(b) : redisGlob(b).test(a);
  }
  const literal = (pattern: string) => pattern.split(REDIS_GLOB);
  const [aStart, aEnd] = [literal(a)[0], literal(a).at(-1) ?? ''];
  const [bStart, bEnd] = [literal(b)[0], literal(b).at(-1) ?? ''];
  return (
    (aStart.startsWith(bStart) || bStart.startsWith(aStart)) &&
    (aEnd.endsWith(bEnd) || bEnd.endsWith(aEnd))
  );
}

/**
 * @internal Whether a message could match two different message patterns
 * `a` and `b` of handlers on transports `aTransport` and `bTransport`
 * (`undefined`: every transport) and be handed to both handlers. Only
 * NATS (each pattern is a subscription of its own: `*` a token, `>` the
 * rest) and Redis with `wildcards` (each a `PSUBSCRIBE`: `*`, `?`, `[...]`)
 * hand one message to the handlers of every pattern it matches; RabbitMQ
 * and MQTT hand it to one handler (the exact pattern's, else the first
 * matching one), Kafka and TCP have no wildcards.
 */
export function patternsOverlap(
  a: string,
  b: string,
  aTransport: unknown,
  bTransport: unknown,
): boolean {
  if (
    aTransport !== undefined &&
    bTransport !== undefined &&
    aTransport !== bTransport
  ) {
    return false;
  }
  const transport = aTransport ?? bTransport;
  return (
    ((transport === undefined || transport === NATS) &&
      (/[*>]/.test(a) || /[*>]/.test(b)) &&
      natsOverlap(a.split('.'), b.split('.'))) ||
    ((transport === undefined || transport === REDIS) &&
      (REDIS_GLOB.test(a) || REDIS_GLOB.test(b)) &&
      redisOverlap(a, b))
  );
}

/**
 * @internal The methods of reads, which must never be deduplicated (a
 * duplicate would get a stale answer), by name: the safe methods of HTTP,
 * WebDAV's `PROPFIND` and `SEARCH` and HTTP's `QUERY` among them; `@All()`
 * answers them too.
 */
const READ_METHODS: ReadonlyMap<unknown, string> = new Map([
  [RequestMethod.GET, 'GET'],
  [RequestMethod.HEAD, 'HEAD'],
  [RequestMethod.OPTIONS, 'OPTIONS'],
  [RequestMethod.SEARCH, 'SEARCH'],
  [RequestMethod.PROPFIND, 'PROPFIND'],
  [RequestMethod.QUERY, 'QUERY'],
  [RequestMethod.ALL, 'ALL'],
]);

/**
 * @internal The read method (`GET`, `HEAD`, `OPTIONS`, `SEARCH`,
 * `PROPFIND`, `QUERY`, or `ALL` for `@All()`) that the route `handler`
 * answers, or `undefined` for a route that changes state (or a handler
 * that is no route).
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

/** `PatternHandler.EVENT` of @nestjs/microservices: an `@EventPattern()` handler. */
const EVENT_HANDLER = 2;

/** A controller or resolver class. */
type Controller = abstract new (...args: never[]) => unknown;

/**
 * @internal A handler as messages name it: `<Class>.<method>`, and the
 * route template of an HTTP route (two classes may share a name).
 */
export function routeName(
  controller: { readonly name: string },
  handler: (...args: never[]) => unknown,
): string {
  const name = `${controller.name}.${handler.name}`;
  return Reflect.getMetadata(PATH_METADATA, handler) === undefined
    ? name
    : `${name} (${routePath(controller, handler)})`;
}

/**
 * @internal The decorated handlers of the application with their options
 * merged over the module's, resolved at bootstrap (by the explorer, which
 * also refuses invalid ones) so that no request resolves them.
 */
@Injectable()
export class IdempotencyRoutes {
  /**
   * The route of each handler, by its controller then its function: a
   * base class's method inherited by several controllers is a route of
   * each, decorated or not as each controller says.
   */
  private readonly routes = new WeakMap<
    Controller,
    WeakMap<(...args: never[]) => unknown, DecoratedRoute | null>
  >();
  /**
   * The decorated message handlers of each pattern: each handler function
   * with the controllers it is a handler of (a base class's method may be
   * inherited by several).
   */
  private readonly patternHandlers = new Map<
    string,
    Map<(...args: never[]) => unknown, Set<Controller>>
  >();
  /**
   * Every message handler the explorer saw, decorated or not, with its
   * pattern: the ones that may be handed the same message (see
   * {@link refuseSharedSettling}).
   */
  private readonly listeners: Listener[] = [];
  /** {@link sharesPattern}'s answer for each pattern, once asked. */
  private readonly shared = new Map<string, boolean>();

  constructor(
    private readonly reflector: Reflector,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  /**
   * The route of `handler` of `controller`, or `null` when it is not
   * decorated (a resolver class's decorator applies to its mutations
   * only, a controller's to its routes that are not reads). Resolved for
   * each controller: a method inherited by several controllers is a route
   * of each, with the options of each (or none). Handlers the explorer did
   * not see (registered later) are resolved on their first request.
   * @throws IdempotencyConfigurationError for invalid route options.
   */
  get(
    controller: abstract new (...args: never[]) => unknown,
    handler: (...args: never[]) => unknown,
  ): DecoratedRoute | null {
    let routes = this.routes.get(controller);
    if (!routes) {
      routes = new WeakMap();
      this.routes.set(controller, routes);
    }
    let route = routes.get(handler);
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
      route = options
        ? {
            options: resolveRouteOptions(this.options, options),
            path: routePath(controller, handler),
            pattern: patterns?.length
              ? patternText(patterns[0])
              : `${controller.name}.${handler.name}`,
            patterns: (patterns ?? []).map(patternRoute),
            declared: (patterns ?? []).map(patternText),
            variant: routeVariant(controller, handler),
          }
        : null;
      routes.set(handler, route);
    }
    return route;
  }

  /**
   * Resolves the route of `handler` of `controller` (see {@link get}) and
   * counts it among the handlers of its message patterns: once, at
   * bootstrap, by the explorer, so that no message counts them.
   * @throws IdempotencyConfigurationError for invalid route options.
   */
  register(
    controller: abstract new (...args: never[]) => unknown,
    handler: (...args: never[]) => unknown,
  ): void {
    for (const pattern of this.get(controller, handler)?.patterns ?? []) {
      this.listens(pattern, handler, controller);
    }
  }

  /**
   * Counts `handler` of `controller`, a message handler without
   * `@Idempotent()`, among the handlers of its message patterns for the
   * startup check of acknowledging handlers only ({@link
   * refuseSharedSettling}): it keeps no records, so it does not make the
   * others' keys their own ({@link sharesPattern}). Called by the explorer
   * at bootstrap.
   * @throws IdempotencyConfigurationError when a decorated handler that
   * acknowledges may be handed the same message.
   */
  registerUndecorated(
    controller: abstract new (...args: never[]) => unknown,
    handler: (...args: never[]) => unknown,
  ): void {
    const patterns = Reflect.getMetadata(
      HANDLER_METADATA.messagePattern,
      handler,
    ) as unknown[] | undefined;
    for (const pattern of (patterns ?? []).map(patternRoute)) {
      this.listen(pattern, handler, controller, false);
    }
  }

  /** Adds a listener and refuses the acknowledging ones that share. */
  private listen(
    pattern: string,
    handler: (...args: never[]) => unknown,
    controller: Controller,
    decorated: boolean,
  ): void {
    const listener: Listener = {
      pattern,
      decorated,
      name: routeName(controller, handler),
      event:
        Reflect.getMetadata(HANDLER_METADATA.messageHandlerType, handler) ===
        EVENT_HANDLER,
      acknowledges:
        decorated &&
        this.get(controller, handler)?.options.acknowledge === true,
      transport: Reflect.getMetadata(
        HANDLER_METADATA.messageTransport,
        handler,
      ) as unknown,
    };
    if (
      this.listeners.some(
        (other) =>
          other.pattern === pattern &&
          other.name === listener.name &&
          other.decorated === decorated,
      )
    ) {
      return;
    }
    this.listeners.push(listener);
    this.shared.clear();
    this.refuseSharedSettling(listener);
  }

  /**
   * Counts `handler` of `controller` among the handlers of `pattern`.
   * @throws IdempotencyConfigurationError when another handler of the
   * pattern has the same class and method names: their records, kept
   * apart by those names (`<key>#<Class>.<method>`), would be one.
   */
  private listens(
    pattern: string,
    handler: (...args: never[]) => unknown,
    controller: Controller,
  ): void {
    let handlers = this.patternHandlers.get(pattern);
    if (!handlers) {
      handlers = new Map();
      this.patternHandlers.set(pattern, handlers);
    }
    for (const [other, controllers] of handlers) {
      for (const otherController of controllers) {
        if (
          (other !== handler || otherController !== controller) &&
          routeName(otherController, other) === routeName(controller, handler)
        ) {
          throw new IdempotencyConfigurationError(
            `Two handlers of the message pattern ${pattern} are both named ${routeName(controller, handler)}: each keeps its records under the message's key and its class and method names, so theirs would be one, and a message would run in the first and never in the second.`,
            'Rename one of the two classes (or its method).',
          );
        }
      }
    }
    let controllers = handlers.get(handler);
    if (!controllers) {
      controllers = new Set();
      handlers.set(handler, controllers);
    }
    controllers.add(controller);
    this.listen(pattern, handler, controller, true);
  }

  /**
   * @throws IdempotencyConfigurationError when a decorated event handler
   * that acknowledges (`acknowledge`) may be handed the same delivery as
   * another event handler, decorated or not: one of the same pattern, or
   * (NATS, Redis with `wildcards`) of a pattern that matches a message of
   * its (see {@link patternsOverlap}). Each would settle the one delivery
   * Nest hands to all of them. On RabbitMQ the first one's ack takes the
   * message from the others (one that failed never sees it again), and the
   * second ack of the delivery closes the channel; on Kafka the first
   * one's commit moves the offset past the others' failures.
   */
  private refuseSharedSettling(added: Listener): void {
    // Nest hands a delivery to every event handler of its pattern on the
    // server of its transport (one that names none is on every server); a
    // message (request-response) handler has the pattern to itself.
    const events = this.listeners.filter((listener) => listener.event);
    // Two handlers meet on a server of a transport both listen on, where a
    // message may match both patterns.
    const meet = (a: Listener, b: Listener) =>
      a.pattern === b.pattern
        ? a.transport === undefined ||
          b.transport === undefined ||
          a.transport === b.transport
        : patternsOverlap(a.pattern, b.pattern, a.transport, b.transport);
    const settling = events.find(
      (route) =>
        route.acknowledges &&
        (route === added || meet(route, added)) &&
        events.some((other) => other !== route && meet(route, other)),
    );
    if (settling) {
      const named = events.filter(
        (other) => other === settling || meet(settling, other),
      );
      const patterns = [...new Set(named.map((route) => route.pattern))];
      throw new IdempotencyConfigurationError(
        `The message pattern${patterns.length > 1 ? 's' : ''} ${patterns.join(', ')} ${patterns.length > 1 ? 'have' : 'has'} ${named.length} handlers that one delivery reaches (${named.map((route) => `${route.name}${route.decorated ? '' : ' without @Idempotent()'}`).join(', ')}), and ${settling.name} acknowledges: Nest hands each delivery to all of them, and the broker settles it once. The first handler's acknowledgement would take the message from the others, so one that failed would never see it again (RabbitMQ also closes the channel on the second acknowledgement of a delivery).`,
        'Give each handler a queue or topic of its own (a fan-out exchange with a queue for each, a consumer group for each), or keep one handler on the pattern.',
      );
    }
  }

  /**
   * Whether another decorated message handler may be handed a message of
   * `route`'s: one of the same pattern, or (NATS, Redis with `wildcards`)
   * of another pattern a message may match too (`orders.*` and
   * `orders.paid`: see {@link patternsOverlap}). Nest hands each event to
   * every handler of its pattern, so each must keep records of its own.
   * A handler alone on patterns no other one's overlap is not shared: its
   * records keep the message's key as they are. Counts the handlers the
   * explorer registered at bootstrap.
   */
  sharesPattern(route: DecoratedRoute): boolean {
    return route.patterns.some((pattern) => {
      let answer = this.shared.get(pattern);
      if (answer === undefined) {
        const own = this.listeners.filter(
          (listener) => listener.decorated && listener.pattern === pattern,
        );
        answer =
          own.length > 1 ||
          this.listeners.some(
            (other) =>
              other.decorated &&
              other.pattern !== pattern &&
              own.some((listener) =>
                patternsOverlap(
                  pattern,
                  other.pattern,
                  listener.transport,
                  other.transport,
                ),
              ),
          );
        this.shared.set(pattern, answer);
      }
      return answer;
    });
  }
}
