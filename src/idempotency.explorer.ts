import { Injectable, type OnModuleInit } from '@nestjs/common';
import {
  RESPONSE_PASSTHROUGH_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import {
  DEFAULT_SCOPE_NAME_METADATA,
  IDEMPOTENT_METADATA,
} from './idempotency.constants.js';
import { handlerKind, unsupportedHandler } from './idempotency.handlers.js';
import {
  IdempotencyRoutes,
  readMethod,
  routeName,
} from './idempotency.routes.js';
import type { IdempotentOptions } from './interfaces/idempotency-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';

/** Parameters through which a handler could send its response itself. */
const SELF_SENDING = new Set<number>([
  RouteParamtypes.RESPONSE,
  RouteParamtypes.NEXT,
]);

/** A class of the application: a controller's, or a provider's. */
type Type = abstract new (...args: never[]) => unknown;

/**
 * @internal Checks every method that carries `@Idempotent()` at bootstrap.
 * The module acts only on the HTTP route handlers and message handlers of
 * controllers, on GraphQL mutations and on the `process` method of BullMQ
 * processors: anywhere else the decorator would do nothing, so the
 * application refuses to start. A handler's options must be valid, and it
 * must not send its response itself (`@Res()` or `@Next()` without
 * `passthrough`), since such a response cannot be stored. A read (`@Get()`,
 * `@Head()`, `@Options()`, `@All()`) decorated itself is refused too; the
 * decorator of its controller leaves it alone.
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly routes: IdempotencyRoutes,
  ) {}

  onModuleInit(): void {
    const ignored: string[] = [];
    const reads: string[] = [];
    const scopeNames = new Map<
      string,
      { readonly type: Type; readonly where: string }
    >();
    for (const [type, inController] of this.classes()) {
      const classOptions = this.reflector.get<IdempotentOptions | undefined>(
        IDEMPOTENT_METADATA,
        type,
      );
      const prototype = type.prototype as Record<string, () => unknown>;
      let handlers = 0;
      let classReads = 0;
      for (const method of this.scanner.getAllMethodNames(prototype)) {
        const handler = prototype[method];
        const own = this.reflector.get<IdempotentOptions | undefined>(
          IDEMPOTENT_METADATA,
          handler,
        );
        const kind = handlerKind(handler, inController, type);
        if (!own && !classOptions) {
          if (kind === 'message') {
            // Not decorated, yet handed the same deliveries as decorated
            // handlers of its pattern: one of theirs must not settle them.
            this.routes.registerUndecorated(type, handler);
          }
          continue;
        }
        const read = kind === 'route' ? readMethod(handler) : undefined;
        if (own && read) {
          reads.push(`${type.name}.${method} (${read})`);
          continue;
        }
        // The class decorator is meant for the handlers of the class, not
        // for the helper methods beside them; on a resolver, for its
        // mutations, not for its queries and field resolvers; on a
        // controller, for its routes that change state, not for its reads.
        const classWide = kind !== 'method' && kind !== 'graphql' && !read;
        classReads += read ? 1 : 0;
        handlers += classWide ? 1 : 0;
        const options = own ?? (classWide ? classOptions : undefined);
        const unsupported = unsupportedHandler(kind);
        if (options && unsupported) {
          ignored.push(`${type.name}.${method} (${unsupported})`);
        } else if (options) {
          this.check(type, method);
          this.ownScope(type, method, scopeNames);
        }
      }
      if (classOptions && handlers === 0) {
        ignored.push(
          classReads > 0
            ? `class ${type.name} (its routes are reads, which it leaves alone)`
            : `class ${type.name} (no route, message or mutation handler)`,
        );
      }
    }
    if (reads.length > 0) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() on ${reads.join(', ')}: a read must not be deduplicated. A GET, HEAD, OPTIONS, SEARCH, PROPFIND or QUERY request changes nothing, so a retry is already safe, and a replay would answer it with the stored, stale response of the first one (an @All() route answers reads too).`,
        'Remove @Idempotent() from the route; it is meant for the routes that change state (@Post(), @Put(), @Patch(), @Delete()).',
        'If the route does change state, declare it with the method that says so, such as @Post().',
      );
    }
    if (ignored.length > 0) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() has no effect on ${ignored.join(', ')}: the module makes idempotent only the HTTP route handlers and the message handlers (@MessagePattern(), @EventPattern()) of controllers, GraphQL mutations (@Mutation()) and the process() method of BullMQ processors, so a duplicate would run again.`,
        'Use IdempotencyService.run() instead: inject IdempotencyService and wrap the work in run({ scope, key }, fn), which runs fn at most once per key, in a transaction with its writes, and returns the stored result to duplicates.',
        'Or move the operation to a route handler or a message handler of a controller.',
        'Or remove @Idempotent() from there.',
      );
    }
  }

  /**
   * Every class of the application's controllers and providers, and whether
   * it is a controller. A factory or value provider counts by the class of
   * the instance it made.
   */
  private classes(): Map<Type, boolean> {
    const classes = new Map<Type, boolean>();
    for (const wrapper of this.discovery.getControllers()) {
      const type = wrapper.metatype as Type | null;
      if (type?.prototype) {
        classes.set(type, true);
      }
    }
    for (const wrapper of this.discovery.getProviders()) {
      const instance: unknown = wrapper.instance;
      // Through its prototype: a proxy may refuse to be read as such.
      const type = (
        wrapper.isNotMetatype
          ? typeof instance === 'object' && instance !== null
            ? (Object.getPrototypeOf(instance) as object | null)?.constructor
            : undefined
          : wrapper.metatype
      ) as Type | undefined;
      if (type?.prototype && type !== Object && !classes.has(type)) {
        classes.set(type, false);
      }
    }
    return classes;
  }

  /**
   * Refuses a handler whose default scope, named from its class and
   * method, another handler has too (two classes of the same name in two
   * modules): an event delivered to both would run in the first and be
   * replayed, never run, to the second.
   * @param seen the handlers of each scope name so far.
   */
  private ownScope(
    type: Type,
    method: string,
    seen: Map<string, { readonly type: Type; readonly where: string }>,
  ): void {
    const handler = (type.prototype as Record<string, () => unknown>)[method];
    const name = this.reflector.getAllAndOverride<
      ((type: Type, method: string) => string) | undefined
    >(DEFAULT_SCOPE_NAME_METADATA, [handler, type])?.(type, method);
    if (name === undefined) {
      return;
    }
    const where = routeName(type, handler);
    const other = seen.get(name);
    if (other !== undefined && other.type !== type) {
      throw new IdempotencyConfigurationError(
        `${other.where} and ${where} would keep their records in the same default scope, ${name}, named after their class and method: the same event delivered to both would run in the first and be replayed to the second, whose handler would never run.`,
        "Give one of them a scope of its own: the decorator's `scope` option (a name, or a function of the request).",
        'Or rename one of the two classes.',
      );
    }
    seen.set(name, { type, where });
  }

  private check(controller: Type, method: string) {
    const where = `${controller.name}.${method}`;
    try {
      // Resolved once, here: requests find them resolved.
      this.routes.register(
        controller,
        (controller.prototype as Record<string, () => unknown>)[method],
      );
    } catch (error) {
      (error as Error).message =
        `@Idempotent() on ${where}: ${(error as Error).message}`;
      throw error;
    }
    const args = (Reflect.getMetadata(
      ROUTE_ARGS_METADATA,
      controller,
      method,
    ) ?? {}) as Record<string, unknown>;
    const sendsItself = Object.keys(args).some((name) =>
      SELF_SENDING.has(Number(name.split(':')[0])),
    );
    const passthrough =
      Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method) ===
      true;
    if (sendsItself && !passthrough) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() on ${where}: the handler sends its response itself (@Res() or @Next()), so its response cannot be stored and replayed.`,
        'Return the body from the handler and let Nest send it.',
        'Or use @Res({ passthrough: true }) to set headers or cookies while Nest sends the body.',
      );
    }
  }
}
