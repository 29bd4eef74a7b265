import {
  Inject,
  Injectable,
  type CallHandler,
  type ExecutionContext,
} from '@nestjs/common';
import { lastValueFrom } from 'rxjs';
import { IDEMPOTENCY_KEY_HEADER } from '../client/client.constants.js';
import { newAttempt, type Attempt } from '../core/attempt.js';
import { IdempotencyExecutor } from '../core/idempotency.executor.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import {
  IdempotencyRoutes,
  receivedPatternRoute,
  type DecoratedRoute,
} from '../idempotency.routes.js';
import {
  afterFailure,
  logDropped,
  toRpcException,
} from './message-failures.js';
import { messageTransport } from './message-transports.js';
import { usableKey, type MessageTransport } from './message-transport.js';

/** Field of a message's data that carries its key by default. */
export const MESSAGE_KEY_FIELD = 'idempotencyKey';

/**
 * @internal The key header names of messages: the module's `headerName`,
 * then `Idempotency-Key`, which messages were read by before `headerName`
 * applied to them.
 */
export function messageHeaderNames(headerName: string): readonly string[] {
  return headerName.toLowerCase() === IDEMPOTENCY_KEY_HEADER.toLowerCase()
    ? [headerName]
    : [headerName, IDEMPOTENCY_KEY_HEADER];
}

/** A message's key as found, and where a refusal of it says it was. */
interface MessageKey {
  readonly key: unknown;
  /** Whether it is the handler's own (its place in a log). */
  readonly handlers: boolean;
  /** The key header it came in, if it did; else the data's field. */
  readonly header?: string;
  /** Whether the route's `key` option gave it. */
  readonly option?: boolean;
}

/**
 * The key of a message by default: its data's `idempotencyKey` field, else
 * what the broker carries (RabbitMQ's `messageId`, a key header), else its
 * place in a log (a Kafka message's) after the handler's name,
 * `<Class>.<method>@<topic>/<partition>/<offset>@<timestamp>`: every handler of a topic
 * processes the message once, where the position alone would let the
 * first one's record stand for the others'.
 */
function defaultMessageKey(
  data: unknown,
  transport: MessageTransport,
  headerNames: readonly string[],
  handlerName: string,
): MessageKey {
  const field =
    data !== null && typeof data === 'object'
      ? (data as Record<string, unknown>)[MESSAGE_KEY_FIELD]
      : undefined;
  // A field of no value (`null`) is no key: the broker's is looked for.
  if (field !== undefined && field !== null) {
    return { key: field, handlers: false };
  }
  const carried = usableKey(transport.key(headerNames));
  if (carried !== undefined || transport.position === undefined) {
    return { key: carried?.key, header: carried?.header, handlers: false };
  }
  return { key: `${handlerName}@${transport.position}`, handlers: true };
}

/**
 * Where a message came: its subject, topic, channel or pattern, which a
 * wildcard pattern (`orders.*`) leaves open; the handler's pattern when the
 * transport does not tell. A pattern as its client wrote it (TCP) is the
 * handler's as declared, whatever the order of an object's fields.
 */
function messageChannel(
  transport: MessageTransport,
  route: DecoratedRoute,
): string {
  const { channel } = transport;
  if (channel === undefined || channel === null) {
    return route.pattern;
  }
  const text = typeof channel === 'string' ? channel : JSON.stringify(channel);
  const declared = transport.asWritten
    ? route.declared[route.patterns.indexOf(receivedPatternRoute(text))]
    : undefined;
  return declared ?? text;
}

/**
 * @internal `@Idempotent()` on `@MessagePattern` and `@EventPattern`
 * handlers, on every broker (one file each: `<broker>.transport.ts`): the
 * same shared transaction and deadline as for HTTP, with a key or without
 * one (`required: false`); a duplicate of a finished message gets the
 * stored reply (an event is dropped), the module's refusals become
 * `RpcException`s carrying the problem details, and a message that keeps
 * failing goes to `deadLetter` after `maxAttempts`.
 */
@Injectable()
export class IdempotencyMessages {
  private readonly headerNames: readonly string[];

  constructor(
    private readonly executor: IdempotencyExecutor,
    private readonly routes: IdempotencyRoutes,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    options: ResolvedIdempotencyOptions,
  ) {
    this.headerNames = messageHeaderNames(options.headerName);
  }

  async execute(
    context: ExecutionContext,
    next: CallHandler,
    route: DecoratedRoute,
  ): Promise<unknown> {
    const { options, pattern } = route;
    const handlerName = `${context.getClass().name}.${context.getHandler().name}`;
    const rpc = context.switchToRpc();
    const data: unknown = rpc.getData();
    const transport = messageTransport(rpc.getContext());
    let attempt: Attempt | undefined;
    let result: unknown;
    let ran = false;
    try {
      const { key, handlers, header, option }: MessageKey = options.key
        ? { key: await options.key(context), handlers: false, option: true }
        : defaultMessageKey(data, transport, this.headerNames, handlerName);
      attempt = await newAttempt(context, options, {
        key,
        // Nest hands an event to every handler of its pattern: where several
        // are decorated, each keeps records of its own under the message's
        // key, else the first one's record would stand for the others' (the
        // others would never run).
        keySuffix:
          !handlers && this.routes.sharesPattern(route)
            ? `#${handlerName}`
            : undefined,
        // A refusal names where the key was looked for: the `key` option,
        // the key header it came in, else the data's field.
        ...(option
          ? { keyField: 'key', keyLocation: 'option' }
          : header === undefined
            ? { keyField: MESSAGE_KEY_FIELD, keyLocation: 'field' }
            : { keyField: header, keyLocation: 'header' }),
        parts: {
          method: 'MESSAGE',
          route: pattern,
          params: { channel: messageChannel(transport, route) },
          query: [],
          body: data,
        },
        legacy: true,
        made: handlers,
      });
      // A failure is final beyond its answer (counted, rejected, handed to
      // deadLetter): one a retry may not meet, which the handler caught
      // and answered with its own error, is the 503 it is, and requeued.
      ({ result } = await this.executor.execute(
        attempt,
        options,
        () => {
          ran = true;
          return lastValueFrom(next.handle(), { defaultValue: undefined });
        },
        { final: true },
      ));
    } catch (error) {
      const outcome = await afterFailure(
        this.executor,
        attempt,
        options,
        error,
        { pattern, data, context: rpc.getContext() },
        ran,
      );
      if (outcome === 'reject' && transport.dropsRefused) {
        logDropped(pattern, error);
      } else if (outcome !== 'dead-lettered') {
        await transport.settle(outcome, options);
        throw await toRpcException(error);
      }
      await transport.settle('ack', options);
      return undefined;
    }
    // After the commit (or the replay): a broker told earlier could lose
    // the message with nothing committed.
    await transport.settle('ack', options);
    return result;
  }
}
