import type { MessageTransport } from './message-transport.js';

/** What the adapter reads of Nest's `NatsContext`. */
interface NatsContextLike {
  getSubject(): unknown;
  getHeaders():
    { get?: (name: string) => unknown; keys?: () => string[] } | undefined;
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
      // NATS headers match names exactly; a key header is named case aside,
      // as on the other transports (and in HTTP).
      const present = headers?.keys?.() ?? [];
      for (const name of names) {
        const wanted = name.toLowerCase();
        const found = present.find((key) => key.toLowerCase() === wanted);
        const value = headers?.get?.(found ?? name);
        if (typeof value === 'string' && value !== '') {
          return value;
        }
      }
      return undefined;
    },
    settle: () => Promise.resolve(),
  };
}
