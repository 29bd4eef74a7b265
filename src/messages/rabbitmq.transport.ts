import type { ResolvedRouteOptions } from '../core/executor.options.js';
import {
  headerKey,
  type MessageOutcome,
  type MessageTransport,
} from './message-transport.js';

/** What the adapter reads of Nest's `RmqContext`. */
interface RmqContextLike {
  getPattern(): unknown;
  getMessage():
    | {
        properties?: {
          messageId?: unknown;
          headers?: Record<string, unknown>;
        };
      }
    | undefined;
  getChannelRef(): AmqpChannel | undefined;
}

interface AmqpChannel {
  ack(message: unknown): void;
  nack(message: unknown, allUpTo?: boolean, requeue?: boolean): void;
}

/**
 * @internal RabbitMQ (`RmqContext`): the key is the AMQP `messageId`, else
 * a key header of the message's properties; a route that acknowledges acks,
 * requeues or rejects (dead-letters) it on its channel.
 */
export function rabbitmqTransport(
  context: unknown,
): MessageTransport | undefined {
  if (typeof (context as RmqContextLike).getChannelRef !== 'function') {
    return undefined;
  }
  const rmq = context as RmqContextLike;
  const properties = rmq.getMessage()?.properties;
  return {
    channel: rmq.getPattern(),
    key: (names) => {
      const messageId = properties?.messageId;
      return messageId !== undefined && messageId !== null && messageId !== ''
        ? { key: String(messageId) }
        : headerKey(properties?.headers, names);
    },
    settle: (outcome, options) => {
      settle(rmq, options, outcome);
      return Promise.resolve();
    },
  };
}

function settle(
  rmq: RmqContextLike,
  options: ResolvedRouteOptions,
  outcome: MessageOutcome,
): void {
  const channel = options.acknowledge ? rmq.getChannelRef() : undefined;
  const message = rmq.getMessage();
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
