import { headerKey, type MessageTransport } from './message-transport.js';

/** What the adapter reads of Nest's `NatsContext`. */
interface NatsContextLike {
  getSubject(): unknown;
  getHeaders():
    | {
        get?: (name: string) => unknown;
        values?: (name: string) => unknown[];
        keys?: () => string[];
      }
    | undefined;
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
      // as on the other transports (and in HTTP). A name holds every value
      // it was sent with.
      const present = headers?.keys?.() ?? [];
      return headerKey(
        Object.fromEntries(
          present.map((key) => [
            key,
            headers?.values?.(key) ?? headers?.get?.(key),
          ]),
        ),
        names,
      );
    },
    settle: () => Promise.resolve(),
  };
}
