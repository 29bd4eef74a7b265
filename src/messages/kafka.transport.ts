import { headerKey, type MessageTransport } from './message-transport.js';

/** What the module reads of a kafkajs message (`KafkaMessage`). */
export interface KafkaMessageLike {
  /** Its offset in its partition, as kafkajs gives it (a decimal string). */
  readonly offset: string;
  /** Its timestamp (epoch ms, a decimal string), as kafkajs gives it. */
  readonly timestamp?: string;
  /** Its headers: a key header's value is a string or a Buffer. */
  readonly headers?: Readonly<Record<string, unknown>>;
}

/**
 * What the module calls of a kafkajs `Consumer`: pass the consumer
 * itself.
 */
export interface KafkaOffsetCommitter {
  /** kafkajs's `consumer.commitOffsets()`: the next offset to read, per partition. */
  commitOffsets(
    offsets: Array<{ topic: string; partition: number; offset: string }>,
  ): Promise<void>;
}

/**
 * Whether a message of Nest's Kafka transport awaits a reply (a
 * `@MessagePattern` request: its correlation id and reply topic headers),
 * which carries a refusal back to its sender; else it is an event.
 */
function awaitsReply(message: KafkaMessageLike): boolean {
  const headers = message.headers ?? {};
  return (
    headers['kafka_correlationId'] !== undefined &&
    headers['kafka_replyTopic'] !== undefined
  );
}

/** What the adapter reads of Nest's `KafkaContext`. */
interface KafkaContextLike {
  getTopic(): string;
  getPartition(): number;
  getMessage(): KafkaMessageLike;
  getConsumer(): KafkaOffsetCommitter | null | undefined;
}

/**
 * @internal A Kafka message's place in its log and its timestamp,
 * `<topic>/<partition>/<offset>@<timestamp>`, which every redelivery of it
 * shares: the timestamp tells it from a message at the same place of a
 * topic deleted and created again (offsets start over).
 */
export function kafkaPosition(
  topic: string,
  partition: number,
  message: KafkaMessageLike,
): string {
  const place = `${topic}/${partition}/${message.offset}`;
  return message.timestamp ? `${place}@${message.timestamp}` : place;
}

/**
 * @internal Commits a message's offset: the next one, as Kafka records
 * what a group consumes next.
 */
export function commitOffset(
  consumer: KafkaOffsetCommitter,
  topic: string,
  partition: number,
  message: KafkaMessageLike,
): Promise<void> {
  return consumer.commitOffsets([
    { topic, partition, offset: (BigInt(message.offset) + 1n).toString() },
  ]);
}

/**
 * @internal Kafka (`KafkaContext` of `@nestjs/microservices`): the key
 * header, else the message's place in the log (qualified by the handler:
 * see `MessageTransport.position`); a route that acknowledges commits the offset after the
 * record, and leaves a failed message's offset alone (the error goes back
 * to kafkajs, which delivers it again). An event refused for good is
 * dropped (see `MessageTransport.dropsRefused`): delivered again, it would
 * hold up its partition for ever.
 */
export function kafkaTransport(context: unknown): MessageTransport | undefined {
  if (typeof (context as KafkaContextLike).getConsumer !== 'function') {
    return undefined;
  }
  const kafka = context as KafkaContextLike;
  const topic = kafka.getTopic();
  const partition = kafka.getPartition();
  const message = kafka.getMessage();
  return {
    channel: topic,
    key: (names) => headerKey(message.headers, names),
    position: kafkaPosition(topic, partition, message),
    dropsRefused: !awaitsReply(message),
    settle: async (outcome, options) => {
      const consumer = kafka.getConsumer();
      if (outcome === 'ack' && options.acknowledge && consumer) {
        await commitOffset(consumer, topic, partition, message);
      }
    },
  };
}
