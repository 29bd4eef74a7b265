import {
  HttpException,
  Injectable,
  type CallHandler,
  type ExecutionContext,
} from '@nestjs/common';
import { lastValueFrom } from 'rxjs';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { IdempotencyHttpException } from '../exceptions/idempotency-http.exception.js';
import { IdempotencyKeyMissingException } from '../exceptions/idempotency-key-missing.exception.js';
import { newAttempt, type Attempt } from '../core/attempt.js';
import { IdempotencyExecutor } from '../core/idempotency.executor.js';
import { RETRY_LATER_STATUSES } from '../core/failures.js';
import { loadRequiredPeer } from '../core/optional-peer.js';

/** Field of a message's data that carries its key by default. */
export const MESSAGE_KEY_FIELD = 'idempotencyKey';

interface TransportContext {
  /** NATS: the subject the message was published on. */
  getSubject?: () => unknown;
  /** MQTT and Kafka: the topic. */
  getTopic?: () => unknown;
  /** Redis: the channel. */
  getChannel?: () => unknown;
  /** RabbitMQ and TCP: the pattern the message carried. */
  getPattern?: () => unknown;
  getMessage?: () => { properties?: { messageId?: unknown } } | undefined;
  getHeaders?: () => { get?: (name: string) => unknown } | undefined;
  /** RabbitMQ: the channel the message came on. */
  getChannelRef?: () => AmqpChannel | undefined;
}

interface AmqpChannel {
  ack(message: unknown): void;
  nack(message: unknown, allUpTo?: boolean, requeue?: boolean): void;
}

/**
 * Settles a RabbitMQ message when the route acknowledges: `ack`, `requeue`
 * (for a redelivery, after `retryAfter` seconds) or `reject` (dead-letter).
 * Other transports: nothing.
 */
function settle(
  transport: TransportContext | undefined,
  options: ResolvedRouteOptions,
  outcome: 'ack' | 'requeue' | 'reject',
): void {
  const channel = options.acknowledge
    ? transport?.getChannelRef?.()
    : undefined;
  const message = transport?.getMessage?.();
  if (!channel || !message) {
    return;
  }
  if (outcome === 'ack') {
    channel.ack(message);
  } else if (outcome === 'reject') {
    channel.nack(message, false, false);
  } else {
    // Not at once: a failure that lasts (the database is down) would
    // otherwise come back as fast as the broker can redeliver it. The
    // message keeps its prefetch slot meanwhile.
    setTimeout(() => {
      try {
        channel.nack(message, false, true);
      } catch {
        // The channel closed: the broker requeues the message by itself.
      }
    }, options.retryAfter * 1000).unref();
  }
}

/**
 * Client errors that a redelivery of the same message may not raise again:
 * those that ask for a retry later, and a duplicate still executing (409).
 */
const RETRYABLE_CLIENT_STATUSES = new Set([...RETRY_LATER_STATUSES, 409]);

/**
 * How a failed message is settled: rejected (dead-lettered, or dropped when
 * the queue has no dead-letter exchange) when a redelivery can only fail the
 * same way (the key of another message, or a 4xx `HttpException` such as a
 * `ValidationPipe` refusal); requeued otherwise (a database outage, a
 * concurrent duplicate in reject mode, any other error).
 */
function failedOutcome(error: unknown): 'requeue' | 'reject' {
  const problem = (
    error as { getError?: () => { type?: string } } | undefined
  )?.getError?.();
  if (problem?.type === 'urn:idempotency:key-reused') {
    return 'reject';
  }
  if (error instanceof HttpException) {
    const status = error.getStatus();
    return status >= 400 &&
      status < 500 &&
      !RETRYABLE_CLIENT_STATUSES.has(status)
      ? 'reject'
      : 'requeue';
  }
  return 'requeue';
}

/**
 * Where a message came: its subject, topic, channel or pattern, which a
 * wildcard pattern (`orders.*`) leaves open; the handler's pattern when the
 * transport does not tell.
 */
function messageChannel(
  transport: TransportContext | undefined,
  pattern: string,
): string {
  const channel =
    transport?.getSubject?.() ??
    transport?.getTopic?.() ??
    transport?.getChannel?.() ??
    transport?.getPattern?.();
  return typeof channel === 'string'
    ? channel
    : channel === undefined || channel === null
      ? pattern
      : JSON.stringify(channel);
}

/**
 * The key of a message by default: its data's `idempotencyKey` field, else the
 * transport's message id (RabbitMQ `messageId`), else an `Idempotency-Key`
 * header (NATS and other transports with headers).
 */
function defaultMessageKey(
  data: unknown,
  transport: TransportContext | undefined,
): unknown {
  if (data !== null && typeof data === 'object' && MESSAGE_KEY_FIELD in data) {
    return (data as Record<string, unknown>)[MESSAGE_KEY_FIELD];
  }
  const messageId = transport?.getMessage?.()?.properties?.messageId;
  if (messageId !== undefined && messageId !== null && messageId !== '') {
    return String(messageId);
  }
  const header = transport?.getHeaders?.()?.get?.('Idempotency-Key');
  return typeof header === 'string' && header !== '' ? header : undefined;
}

/**
 * @internal `@Idempotent()` on `@MessagePattern` and `@EventPattern`
 * handlers: the same shared transaction as for HTTP; a duplicate of a
 * finished message gets the stored reply (an event is dropped), and the
 * module's refusals become `RpcException`s carrying the problem details.
 */
@Injectable()
export class IdempotencyMessages {
  constructor(private readonly executor: IdempotencyExecutor) {}

  async execute(
    context: ExecutionContext,
    next: CallHandler,
    options: ResolvedRouteOptions,
    pattern: string,
  ): Promise<unknown> {
    const rpc = context.switchToRpc();
    const data: unknown = rpc.getData();
    const transport = rpc.getContext<TransportContext | undefined>();
    let attempt: Attempt;
    try {
      const key = options.key
        ? await options.key(context)
        : defaultMessageKey(data, rpc.getContext());
      if (key === undefined) {
        if (options.required) {
          throw new IdempotencyKeyMissingException(MESSAGE_KEY_FIELD, 'field');
        }
        try {
          const result = await lastValueFrom(next.handle(), {
            defaultValue: undefined,
          });
          settle(transport, options, 'ack');
          return result;
        } catch (error) {
          settle(transport, options, failedOutcome(error));
          throw error;
        }
      }
      attempt = await newAttempt(context, options, {
        key,
        keyField: MESSAGE_KEY_FIELD,
        keyLocation: 'field',
        parts: {
          method: 'MESSAGE',
          route: pattern,
          params: { channel: messageChannel(transport, pattern) },
          query: [],
          body: data,
        },
        legacy: true,
      });
    } catch (error) {
      // A message without a usable key never succeeds: not redelivered.
      settle(
        transport,
        options,
        error instanceof IdempotencyHttpException ? 'reject' : 'requeue',
      );
      throw await toRpcException(error);
    }
    try {
      const result = await this.process(attempt, options, () =>
        lastValueFrom(next.handle(), { defaultValue: undefined }),
      );
      settle(transport, options, 'ack');
      return result;
    } catch (error) {
      settle(transport, options, failedOutcome(error));
      throw error;
    }
  }

  private async process(
    attempt: Attempt,
    options: ResolvedRouteOptions,
    handle: () => Promise<unknown>,
  ): Promise<unknown> {
    try {
      const { result } = await this.executor.execute(attempt, options, handle);
      return result;
    } catch (error) {
      if (!(error instanceof IdempotencyHttpException)) {
        // Transports do not log a failed event handler: the module does.
        this.executor.emit('failed', attempt, { error });
      }
      throw await toRpcException(error);
    }
  }
}

/**
 * The module's refusals as an `RpcException` (what microservice transports
 * send back), with the problem details as its error.
 */
async function toRpcException(error: unknown): Promise<unknown> {
  if (!(error instanceof IdempotencyHttpException)) {
    return error;
  }
  // Loaded here only: applications without microservices do not need it.
  const { RpcException } = await loadRequiredPeer(
    '@nestjs/microservices',
    () => import('@nestjs/microservices'),
    'Idempotent message handlers need @nestjs/microservices, which is not installed.',
  );
  return new RpcException({ ...error.getProblem() });
}
