import { PATH_METADATA } from '@nestjs/common/constants.js';

/**
 * @internal Metadata keys of the decorators that make a method a handler of
 * some kind. The packages that define them are optional, so the module never
 * imports them: these are the plain strings of their constants
 * (`PATTERN_METADATA` of @nestjs/microservices 12, `RESOLVER_TYPE_METADATA`,
 * `RESOLVER_PROPERTY_METADATA` and `RESOLVER_REFERENCE_METADATA` of
 * @nestjs/graphql 14, `MESSAGE_MAPPING_METADATA` of @nestjs/websockets 12,
 * `SCHEDULER_TYPE` of @nestjs/schedule 12, which does not export it,
 * `PROCESSOR_METADATA` of @nestjs/bullmq 12).
 */
export const HANDLER_METADATA = {
  /** `@MessagePattern()` / `@EventPattern()`: the handler's patterns. */
  messagePattern: 'microservices:pattern',
  /** `@Query()`, `@Mutation()`, `@Subscription()`. */
  graphqlResolver: 'graphql:resolver_type',
  /** `@ResolveField()`. */
  graphqlField: 'graphql:resolve_property',
  /** `@ResolveReference()` (federation). */
  graphqlReference: 'graphql:resolve_reference',
  /** `@SubscribeMessage()` of a WebSocket gateway. */
  websocketMessage: 'websockets:message_mapping',
  /** `@Cron()`, `@Interval()`, `@Timeout()`. */
  scheduledJob: 'SCHEDULER_TYPE',
  /** `@Processor()` of @nestjs/bullmq, on the class. */
  bullmqProcessor: 'bullmq:processor_metadata',
} as const;

/**
 * @internal What a method is to Nest, as far as the module can tell:
 * `route`, `message` and `processor` (the `process` method of a BullMQ
 * processor) are the handlers the module makes idempotent.
 */
export type HandlerKind =
  | 'route'
  | 'message'
  | 'processor'
  | 'graphql'
  | 'websocket'
  | 'scheduled'
  | 'method';

/** The kinds of handler the module makes idempotent. */
const SUPPORTED = new Set<HandlerKind>(['route', 'message', 'processor']);

/** How the configuration error names each kind the module cannot act on. */
const UNSUPPORTED: Record<
  Exclude<HandlerKind, 'route' | 'message' | 'processor'>,
  string
> = {
  graphql: 'a GraphQL resolver method',
  websocket: 'a WebSocket gateway message handler',
  scheduled: 'a scheduled job',
  method: 'not a route or message handler',
};

function has(key: string, handler: object): boolean {
  return Reflect.getMetadata(key, handler) !== undefined;
}

/**
 * @internal The kind of `handler`, a method of a controller (`inController`)
 * or of a provider (of class `type`). Nest routes HTTP requests and messages
 * to the methods of controllers only.
 */
export function handlerKind(
  handler: object,
  inController: boolean,
  type?: object,
): HandlerKind {
  if (inController && has(PATH_METADATA, handler)) {
    return 'route';
  }
  if (inController && has(HANDLER_METADATA.messagePattern, handler)) {
    return 'message';
  }
  if (
    has(HANDLER_METADATA.graphqlResolver, handler) ||
    has(HANDLER_METADATA.graphqlField, handler) ||
    has(HANDLER_METADATA.graphqlReference, handler)
  ) {
    return 'graphql';
  }
  if (
    !inController &&
    type !== undefined &&
    has(HANDLER_METADATA.bullmqProcessor, type) &&
    (type as { prototype?: { process?: unknown } }).prototype?.process ===
      handler
  ) {
    return 'processor';
  }
  if (has(HANDLER_METADATA.websocketMessage, handler)) {
    return 'websocket';
  }
  return has(HANDLER_METADATA.scheduledJob, handler) ? 'scheduled' : 'method';
}

/**
 * @internal What the module says of a method of `kind` it cannot act on, or
 * `undefined` for a handler it makes idempotent.
 */
export function unsupportedHandler(kind: HandlerKind): string | undefined {
  return SUPPORTED.has(kind)
    ? undefined
    : UNSUPPORTED[kind as keyof typeof UNSUPPORTED];
}
