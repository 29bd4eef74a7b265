import type { MessageTransport } from './message-transport.js';

/** What the adapter reads of Nest's `NatsContext`. */
interface NatsContextLike {
  getSubject(): unknown;
  getHeaders(): { get?: (name: string) => unknown } | undefined;
}

/**
 * @internal NATS (`NatsContext`): the key is a key header of the message
 * (NATS headers); the broker has nothing to settle.
 */
export function natsTransport(context: unknown): MessageTransport | undefined {
  if (typeof (context as NatsContextLike).getSubject !== 'function') {
    return undefined;
  }
  const nats = context as NatsContextLike;
  return {
    channel: nats.getSubject(),
    key: (names) => {
      const headers = nats.getHeaders();
      for (const name of names) {
        const value = headers?.get?.(name);
        if (typeof value === 'string' && value !== '') {
          return value;
        }
      }
      return undefined;
    },
    settle: () => Promise.resolve(),
  };
}
