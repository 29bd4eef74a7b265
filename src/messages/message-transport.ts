import type { ResolvedRouteOptions } from '../core/executor.options.js';

/**
 * How a message is settled after its attempt: acknowledged (its effects
 * committed, a duplicate dropped, or handed to the dead-letter path),
 * requeued (a redelivery may succeed) or rejected (one can only fail
 * again).
 */
export type MessageOutcome = 'ack' | 'requeue' | 'reject';

/**
 * @internal What the message adapter needs of one broker's context: where
 * the message came, the key the broker carries, and how the message is
 * settled. One file per broker implements it.
 */
export interface MessageTransport {
  /**
   * The subject, topic, channel or pattern the message came on (a wildcard
   * pattern leaves it open), if the transport tells.
   */
  readonly channel: unknown;
  /**
   * The key the broker carries: its message id, a header named by one of
   * `headerNames` (in that order, case aside), or its position in a log.
   */
  key(headerNames: readonly string[]): unknown;
  /**
   * The message's place in a log (Kafka's `<topic>/<partition>/<offset>@<timestamp>`),
   * which every redelivery of it shares: its key when it carries none,
   * qualified by the handler (several handlers of one topic each process
   * it once).
   */
  readonly position?: string;
  /**
   * Settles the message when the route acknowledges (`acknowledge`):
   * resolves once the broker was told.
   */
  settle(outcome: MessageOutcome, options: ResolvedRouteOptions): Promise<void>;
  /**
   * Whether a message refused for good (`reject`: a redelivery can only be
   * refused again) is settled as done rather than failed: the broker has
   * no way to set it aside, and would deliver it again and again ahead of
   * the rest (Kafka, where it holds up its partition). It is dropped, as a
   * queue without a dead-letter exchange drops a rejected message, and
   * logged.
   */
  readonly dropsRefused?: boolean;
}

/** The key header's value among `headers` (names compared case aside). */
export function headerValue(
  headers: Readonly<Record<string, unknown>> | undefined,
  names: readonly string[],
): string | undefined {
  if (!headers) {
    return undefined;
  }
  const entries = Object.entries(headers);
  for (const name of names) {
    const wanted = name.toLowerCase();
    const found = entries.find(([header]) => header.toLowerCase() === wanted);
    const value = headerText(found?.[1]);
    if (value !== undefined) {
      return value;
    }
  }
  return undefined;
}

/** A header's text: a string, the bytes of a Buffer, the first of a list. */
function headerText(value: unknown): string | undefined {
  const first: unknown = Array.isArray(value) ? value[0] : value;
  const text = Buffer.isBuffer(first)
    ? first.toString('utf8')
    : typeof first === 'string'
      ? first
      : undefined;
  return text === '' ? undefined : text;
}

/** A transport that tells nothing and settles nothing. */
export function plainTransport(channel: unknown): MessageTransport {
  return {
    channel,
    key: () => undefined,
    settle: () => Promise.resolve(),
  };
}
