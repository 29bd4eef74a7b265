import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { readKeyValues } from '../core/key-header.js';
import { IdempotencyKeyInvalidException } from '../exceptions/idempotency-key-invalid.exception.js';

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
   * Whether {@link channel} is the pattern as its client wrote it (TCP):
   * an object pattern's fields in the client's order, which Nest routes
   * as one pattern whatever their order. The handler's pattern, as it
   * declares it, is taken for it.
   */
  readonly asWritten?: boolean;
  /**
   * The key the broker carries: its message id, or a header named by one
   * of `headerNames` (in that order, case aside); its position in a log is
   * {@link position}.
   */
  key(headerNames: readonly string[]): CarriedKey;
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

/**
 * @internal A key a broker carries, and the key header it came in (named as
 * the module names it), if it came in one; or why its key header carries
 * no usable key; `undefined` when it carries none.
 */
export type CarriedKey =
  | { readonly key: string; readonly header?: string }
  | { readonly problem: string; readonly header: string }
  | undefined;

/**
 * The key header among `headers` (names compared case aside), read by the
 * rules of HTTP's (`readKeyValues`): one sent under two spellings of its
 * name, or with a list of values, is repeated; a quoted sf-string is
 * unquoted; an empty one is an empty key, which the key rules refuse
 * (read as none, a route that does not require a key would run the
 * message unguarded).
 */
export function headerKey(
  headers: Readonly<Record<string, unknown>> | undefined,
  names: readonly string[],
): CarriedKey {
  if (!headers) {
    return undefined;
  }
  const entries = Object.entries(headers);
  for (const name of names) {
    const wanted = name.toLowerCase();
    const reading = readKeyValues(
      entries
        .filter(([header]) => header.toLowerCase() === wanted)
        .flatMap(([, value]) => headerValues(value)),
    );
    if (reading) {
      return { ...reading, header: name };
    }
  }
  return undefined;
}

/**
 * The values a header was sent with: each of a list (a header sent more
 * than once), the text of bytes; none for a header of no value.
 */
function headerValues(value: unknown): unknown[] {
  if (value === undefined || value === null) {
    return [];
  }
  // An empty list is a header sent with something other than text.
  const values: unknown[] =
    Array.isArray(value) && value.length > 0 ? value : [value];
  return values.map((one) =>
    Buffer.isBuffer(one) ? one.toString('utf8') : one,
  );
}

/**
 * @internal The key a broker carries, if any.
 * @throws IdempotencyKeyInvalidException for a key header that carries no
 * usable key (repeated, a quoted string malformed, no text).
 */
export function usableKey(
  carried: CarriedKey,
): { readonly key: string; readonly header?: string } | undefined {
  if (carried !== undefined && 'problem' in carried) {
    throw new IdempotencyKeyInvalidException(carried.header, carried.problem);
  }
  return carried;
}

/** A transport that tells nothing and settles nothing. */
export function plainTransport(channel: unknown): MessageTransport {
  return {
    channel,
    key: () => undefined,
    settle: () => Promise.resolve(),
  };
}
