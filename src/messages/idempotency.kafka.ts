import { Inject, Injectable } from '@nestjs/common';
import { hash } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import { validScope, type Attempt } from '../core/attempt.js';
import { validKey } from '../core/idempotency-key.js';
import type { ResolvedKeyValidation } from '../core/executor.options.js';
import { headerKey, usableKey } from './message-transport.js';
import { IdempotencyExecutor } from '../core/idempotency.executor.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import {
  resolveRouteOptions,
  type ResolvedIdempotencyOptions,
} from '../idempotency.options.js';
import type { IdempotencyDeadLetterHandler } from '../interfaces/idempotency-dead-letter.interface.js';
import type {
  IdempotencyConcurrencyMode,
  IdempotencyDuration,
  IdempotencyIsolationLevel,
} from '../interfaces/idempotency-options.interface.js';
import {
  commitOffset,
  kafkaPosition,
  type KafkaMessageLike,
  type KafkaOffsetCommitter,
} from './kafka.transport.js';
import { afterFailure, logDropped } from './message-failures.js';
import { messageHeaderNames } from './idempotency.messages.js';

/**
 * The parts of kafkajs's `EachMessagePayload` that the module reads: pass
 * the payload kafkajs gives `eachMessage` as it is.
 */
export interface IdempotentKafkaPayload {
  readonly topic: string;
  readonly partition: number;
  readonly message: KafkaMessageLike & {
    readonly value: Buffer | null;
  };
}

/**
 * Options of `IdempotencyKafka.eachMessage()`. Durations, the concurrency
 * mode and the isolation level default to the module's options.
 */
export interface IdempotentKafkaOptions {
  /**
   * Scope of the messages' keys. Give each consumer group that writes to
   * the same database a scope of its own: their keys
   * (`<topic>/<partition>/<offset>@<timestamp>`) are the same for the same message.
   */
  scope: string;
  /**
   * The header that carries a message's key; without it, a message's key
   * is its place in the log, `<topic>/<partition>/<offset>@<timestamp>`.
   * @default the module's `headerName` (`'Idempotency-Key'`), then
   * `Idempotency-Key`
   */
  headerName?: string;
  /**
   * The consumer to commit each message's offset with, after its record
   * (run it with `autoCommit: false`). Without it, kafkajs commits the
   * offsets it resolved, which it does only after `eachMessage` returned:
   * after the record, too, but in batches.
   * @default none: kafkajs's auto-commit
   */
  consumer?: KafkaOffsetCommitter;
  /**
   * Failed attempts of one message (counted in the store) before it is
   * handed to `deadLetter` and its offset committed. Needs `deadLetter`.
   * @default module `maxAttempts` (none: a failing message blocks its
   * partition for as long as it fails)
   */
  maxAttempts?: number;
  /**
   * Where a message goes after `maxAttempts` failed attempts. Needs
   * `maxAttempts`.
   * @default module `deadLetter`
   */
  deadLetter?: IdempotencyDeadLetterHandler;
  /** How long a message's record is kept. @default module `ttl` */
  ttl?: IdempotencyDuration;
  /** What a concurrent duplicate does. @default module `concurrency` */
  concurrency?: IdempotencyConcurrencyMode;
  /** In `'wait'` mode, how long to wait. @default module `waitTimeout` */
  waitTimeout?: IdempotencyDuration;
  /** Deadline of the handler. @default module `transactionTimeout` */
  transactionTimeout?: IdempotencyDuration;
  /** Isolation level of the handler's transaction. @default module `isolationLevel` */
  isolationLevel?: IdempotencyIsolationLevel;
}

/**
 * A kafkajs `eachMessage` handler made idempotent, for a consumer run with
 * kafkajs directly (the Nest Kafka transport needs only `@Idempotent()`).
 * Inject it and wrap the handler: each message runs at most once per key
 * (a key header, else `<topic>/<partition>/<offset>@<timestamp>`), its writes and its
 * record commit together, then its offset is committed (by `consumer`, or
 * by kafkajs afterwards); a duplicate is skipped; a message that fails
 * `maxAttempts` times goes to `deadLetter` instead of blocking its
 * partition. `handler` gets the data library's handle of the message's
 * transaction: TypeORM's `EntityManager` by default (`undefined` with a
 * store other than PostgreSQL).
 *
 * @example
 * await consumer.run({
 *   autoCommit: false,
 *   eachMessage: this.kafka.eachMessage(
 *     async ({ message }, manager) => {
 *       await manager.insert(Payment, JSON.parse(message.value!.toString()));
 *     },
 *     { scope: 'payments', consumer, maxAttempts: 5, deadLetter },
 *   ),
 * });
 */
@Injectable()
export class IdempotencyKafka {
  constructor(
    private readonly executor: IdempotencyExecutor,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  /**
   * The `eachMessage` of `consumer.run()`: `handler` made idempotent.
   * @throws IdempotencyConfigurationError for invalid options.
   */
  eachMessage<
    Payload extends IdempotentKafkaPayload,
    Transaction = EntityManager,
  >(
    handler: (payload: Payload, manager: Transaction) => Promise<void>,
    options: IdempotentKafkaOptions,
  ): (payload: Payload) => Promise<void> {
    const { scope: given, headerName, consumer, ...own } = options;
    const scope = validScope(given);
    const route = resolveRouteOptions(this.options, own);
    const headerNames = messageHeaderNames(
      headerName ?? this.options.headerName,
    );
    return async (payload) => {
      const { topic, partition, message } = payload;
      let attempt: Attempt | undefined;
      let ran = false;
      try {
        attempt = {
          started: Date.now(),
          scope,
          key: kafkaAttemptKey(
            topic,
            partition,
            message,
            headerNames,
            route.keyValidation,
          ),
          method: 'MESSAGE',
          path: topic,
          fingerprint: hash(
            'sha256',
            Buffer.concat([
              Buffer.from(`${topic}\u0000`),
              message.value ?? Buffer.alloc(0),
            ]),
          ),
        };
        // A failure is final beyond its answer (counted, handed to
        // deadLetter): one a retry may not meet, which the handler caught
        // and answered with its own error, is the 503 it is, and delivered
        // again.
        await this.executor.execute(
          attempt,
          route,
          (transaction) => {
            ran = true;
            return handler(
              payload,
              (transaction.state === 'none'
                ? undefined
                : transaction.manager) as Transaction,
            );
          },
          { final: true },
        );
      } catch (error) {
        const outcome = await afterFailure(
          this.executor,
          attempt,
          route,
          error,
          { pattern: topic, data: message.value, context: payload },
          ran,
        );
        // Dead-lettered, or processed already (a duplicate whose result
        // was not stored): done. Refused for good: dropped, not to hold up
        // the partition. Else kafkajs delivers the message again: its
        // offset stays.
        if (outcome === 'reject') {
          logDropped(topic, error);
        } else if (outcome !== 'dead-lettered' && outcome !== 'ack') {
          throw error;
        }
      }
      if (consumer) {
        await commitOffset(consumer, topic, partition, message);
      }
    };
  }
}

/**
 * The key of a Kafka message: a key header (names compared case aside),
 * valid by the key rules, else its place in the log ({@link kafkaPosition}),
 * the module's own, which the clients' key rules do not apply to.
 * @throws IdempotencyKeyInvalidException for a header that breaks the rules.
 */
function kafkaAttemptKey(
  topic: string,
  partition: number,
  message: KafkaMessageLike,
  headerNames: readonly string[],
  rules: ResolvedKeyValidation,
): string {
  const carried = usableKey(headerKey(message.headers, headerNames));
  return carried === undefined
    ? kafkaPosition(topic, partition, message)
    : validKey(carried.key, rules, carried.header ?? headerNames[0]);
}
