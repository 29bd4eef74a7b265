import { ServerKafka, type KafkaOptions } from '@nestjs/microservices';
import {
  Kafka,
  type Consumer,
  type ConsumerRunConfig,
  type EachMessagePayload,
  type IHeaders,
  type KafkaMessage,
  type Producer,
  type TopicPartitionOffsetAndMetadata,
} from 'kafkajs';

/** The timestamp of a delivered message, unless it gives its own. */
export const SENT_AT = '1764000000000';

/** What the recorded consumer saw, in order. */
export type KafkaCall =
  | { readonly call: 'eachMessage'; readonly offset: string }
  | { readonly call: 'failed'; readonly offset: string; readonly error: string }
  | {
      readonly call: 'commitOffsets';
      readonly offsets: TopicPartitionOffsetAndMetadata[];
      /** What the test read of the database at the moment of the commit. */
      readonly seen: unknown;
    }
  | {
      readonly call: 'autoCommit';
      readonly offset: string;
      /** What the test read of the database when kafkajs would commit. */
      readonly seen: unknown;
    };

/**
 * A kafkajs consumer (a real `Consumer` of kafkajs, its events and
 * listeners kafkajs's own) whose calls that would reach a broker are
 * recorded instead: `connect`, `subscribe`, `run` (its `eachMessage` kept),
 * `commitOffsets` (with what `onCommit` read of the database then) and
 * `disconnect`. No Kafka broker runs here: `deliver()` stands in for the
 * fetch loop, calling `eachMessage` as kafkajs does, and again after a
 * failure, as kafkajs does once the consumer seeks back to the offset.
 */
export class RecordedConsumer {
  readonly calls: KafkaCall[] = [];
  readonly subscriptions: unknown[] = [];
  readonly consumer: Consumer;
  /** Read at each commit: what the database holds then. */
  onCommit: () => Promise<unknown> = () => Promise.resolve(undefined);
  private config: ConsumerRunConfig | undefined;

  constructor(kafka: Kafka, groupId: string) {
    this.consumer = Object.assign(kafka.consumer({ groupId }), {
      connect: () => Promise.resolve(),
      disconnect: () => Promise.resolve(),
      subscribe: (subscription: unknown) => {
        this.subscriptions.push(subscription);
        return Promise.resolve();
      },
      run: (config?: ConsumerRunConfig) => {
        this.config = config;
        return Promise.resolve();
      },
      commitOffsets: async (offsets: TopicPartitionOffsetAndMetadata[]) => {
        this.calls.push({
          call: 'commitOffsets',
          offsets,
          seen: await this.onCommit(),
        });
      },
    });
  }

  /** The run's configuration, as the consumer's owner gave it. */
  get runConfig(): ConsumerRunConfig {
    if (!this.config) {
      throw new Error('The consumer was not run');
    }
    return this.config;
  }

  /**
   * Delivers a message at `offset` of `topic`/`partition` as kafkajs does:
   * `eachMessage`, and, after a failure, the same message again, at most
   * `deliveries` times in all. With auto-commit, a message that
   * `eachMessage` finished is resolved and its offset committed after it.
   * @returns whether `eachMessage` finished.
   */
  async deliver(
    topic: string,
    partition: number,
    message: {
      offset: string;
      value: unknown;
      headers?: IHeaders;
      timestamp?: string;
    },
    deliveries = 1,
  ): Promise<boolean> {
    const kafkaMessage: KafkaMessage = {
      key: null,
      value: Buffer.from(JSON.stringify(message.value)),
      timestamp: message.timestamp ?? SENT_AT,
      attributes: 0,
      offset: message.offset,
      headers: message.headers ?? {},
    };
    for (let delivery = 0; delivery < deliveries; delivery += 1) {
      this.calls.push({ call: 'eachMessage', offset: message.offset });
      const payload: EachMessagePayload = {
        topic,
        partition,
        // kafkajs hands each delivery a message of its own.
        message: { ...kafkaMessage, headers: { ...kafkaMessage.headers } },
        heartbeat: () => Promise.resolve(),
        pause: () => () => undefined,
      };
      try {
        await this.runConfig.eachMessage!(payload);
      } catch (error) {
        this.calls.push({
          call: 'failed',
          offset: message.offset,
          error: (error as Error).message,
        });
        continue;
      }
      if (this.runConfig.autoCommit !== false) {
        this.calls.push({
          call: 'autoCommit',
          offset: (BigInt(message.offset) + 1n).toString(),
          seen: await this.onCommit(),
        });
      }
      return true;
    }
    return false;
  }
}

/** A kafkajs producer whose connection is recorded (nothing is sent). */
function recordedProducer(kafka: Kafka): Producer {
  return Object.assign(kafka.producer(), {
    connect: () => Promise.resolve(),
    disconnect: () => Promise.resolve(),
    send: () => Promise.reject(new Error('No Kafka broker: nothing is sent')),
  });
}

/** A kafkajs client to no broker: its consumer and producer are recorded. */
export function recordedKafka(groupId: string): {
  readonly kafka: Kafka;
  readonly recorded: RecordedConsumer;
} {
  const kafka = new Kafka({
    clientId: 'recorded',
    brokers: ['127.0.0.1:1'],
    logLevel: 0,
  });
  const recorded = new RecordedConsumer(kafka, groupId);
  const producer = recordedProducer(kafka);
  return {
    kafka: Object.assign(kafka, {
      consumer: () => recorded.consumer,
      producer: () => producer,
    }),
    recorded,
  };
}

/**
 * Nest's Kafka transport (`ServerKafka`, all its code: the subscription,
 * the run, the message's parsing, `KafkaContext`, the event's handling)
 * on a kafkajs client whose consumer is recorded.
 */
export class RecordedKafkaServer extends ServerKafka {
  constructor(
    options: KafkaOptions['options'],
    private readonly recordedClient: Kafka,
  ) {
    super(options ?? {});
  }

  override createClient<T = Kafka>(): Promise<T> {
    return Promise.resolve(this.recordedClient as T);
  }
}
