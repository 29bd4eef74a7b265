/**
 * A message handed to the dead-letter path: its handler failed
 * `maxAttempts` times (counted in the store, by key), or it failed in a way
 * a redelivery can only repeat (a 4xx `HttpException` of the handler; a
 * key missing, malformed or another message's). After the
 * dead-letter handler returns, the message is acknowledged (RabbitMQ) or
 * its offset committed (Kafka), so that it no longer blocks its queue or
 * partition.
 */
export interface IdempotencyDeadLetter {
  /**
   * The message's scope; `undefined` for a message refused for its key
   * (missing or malformed), before its scope was resolved.
   */
  readonly scope: string | undefined;
  /**
   * The message's key; `undefined` for a message without a key, or whose
   * key was refused (malformed).
   */
  readonly key: string | undefined;
  /** The handler's pattern (for Kafka, the topic it subscribed to). */
  readonly pattern: string;
  /** The message's data, as the handler got it. */
  readonly data: unknown;
  /** What the handler threw the last time. */
  readonly error: unknown;
  /**
   * Failed attempts of the key so far, this one included; 0 for a message
   * handed over at once without a count (a refusal of the module: its key
   * missing, malformed or another message's).
   */
  readonly attempts: number;
  /**
   * The transport's context (`KafkaContext`, `RmqContext`, ...), or the
   * kafkajs `EachMessagePayload` for `IdempotencyKafka.eachMessage()`:
   * what to copy the original message from.
   */
  readonly context: unknown;
}

/**
 * Hands a poison message aside: publishes it to a dead-letter topic or
 * queue, or stores it. It runs outside the handler's transaction; the
 * message is acknowledged only once it resolved. If it throws, the message
 * is not acknowledged and comes back (and is handed over again).
 *
 * @example
 * deadLetter: async ({ context, error, attempts }) => {
 *   const message = (context as KafkaContext).getMessage();
 *   await producer.send({
 *     topic: 'payments.dead-letter',
 *     messages: [{ key: message.key, value: message.value,
 *       headers: { ...message.headers, error: String(error), attempts: String(attempts) } }],
 *   });
 * }
 */
export type IdempotencyDeadLetterHandler = (
  letter: IdempotencyDeadLetter,
) => void | Promise<void>;
