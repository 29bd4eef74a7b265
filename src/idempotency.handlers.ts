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
  /** Theirs: `1` for a message (request-response) handler, `2` for an event's. */
  messageHandlerType: 'microservices:handler_type',
  /** Theirs: the transport it listens on, if one is named (else every one). */
  messageTransport: 'microservices:transport',
  /** `@Query()`, `@Mutation()`, `@Subscription()`: `'Query'`, `'Mutation'`, ... */
  graphqlResolver: 'graphql:resolver_type',
  /** The schema name of a resolver method, when its decorator names it. */
  graphqlName: 'graphql:resolver_name',
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
 * `route`, `message`, `mutation` and `processor` (the `process` method of a
 * BullMQ processor) are the handlers the module makes idempotent; `graphql`
 * is any other resolver method (query, subscription, field or reference
 * resolver).
 */
export type HandlerKind =
  | 'route'
  | 'message'
  | 'mutation'
  | 'processor'
  | 'graphql'
  | 'websocket'
  | 'scheduled'
  | 'method';

/** The kinds of handler the module makes idempotent. */
const SUPPORTED = new Set<HandlerKind>([
  'route',
  'message',
  'mutation',
  'processor',
]);

/** How the configuration error names each kind the module cannot act on. */
const UNSUPPORTED: Record<
  Exclude<HandlerKind, 'route' | 'message' | 'mutation' | 'processor'>,
  string
> = {
  graphql: 'a GraphQL query, subscription or field resolver',
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
  const graphqlField =
    has(HANDLER_METADATA.graphqlField, handler) ||
    has(HANDLER_METADATA.graphqlReference, handler);
  const resolverType: unknown = Reflect.getMetadata(
    HANDLER_METADATA.graphqlResolver,
    handler,
  );
  if (resolverType === 'Mutation' && !graphqlField) {
    return 'mutation';
  }
  if (resolverType !== undefined || graphqlField) {
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
