import type { IdempotencyRedactor } from './idempotency-privacy.interface.js';
import type { ExecutionContext } from '@nestjs/common';
import type { IdempotencyDeadLetterHandler } from './idempotency-dead-letter.interface.js';

/**
 * A span of time: a number of milliseconds, or a string such as `'500ms'`,
 * `'30s'`, `'15m'`, `'24h'` or `'7d'`.
 */
export type IdempotencyDuration = number | string;

/**
 * What a duplicate does while the first request with the same key is still
 * executing.
 * - `'reject'`: answer at once with `409 Conflict` and a `Retry-After` header.
 * - `'wait'`: wait (at most `waitTimeout`) for the first request to finish,
 *   then replay its response; answer `409` if it is still running by then.
 */
export type IdempotencyConcurrencyMode = 'reject' | 'wait';

/**
 * An isolation level of PostgreSQL, as `START TRANSACTION ISOLATION LEVEL`
 * takes it (PostgreSQL runs `'READ UNCOMMITTED'` as `'READ COMMITTED'`).
 */
export type IdempotencyIsolationLevel =
  'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/**
 * Resolves the scope of a request: keys are unique per scope, and a record is
 * never visible to a request of another scope. Typically the authenticated
 * user or tenant. It must be a non-empty string of well-formed Unicode (no
 * lone surrogate, which PostgreSQL would keep as U+FFFD, sharing another
 * scope's records), without NUL characters, of at most 1024 bytes of
 * UTF-8: another value fails the request as a configuration error (500).
 *
 * @example
 * scope: (context) => context.switchToHttp().getRequest().user.id
 */
export type IdempotencyScopeResolver = (
  context: ExecutionContext,
) => string | Promise<string>;

/**
 * Derives the idempotency key of a request instead of reading it from the
 * header, for clients that send none. Return `undefined` when the request has
 * no key. The key is validated like a header key.
 *
 * @example
 * // one payment per user, amount and merchant
 * key: (context) => {
 *   const { user, body } = context.switchToHttp().getRequest();
 *   return createHash('sha256').update(`${user.id}:${body.amount}:${body.merchantId}`).digest('hex');
 * }
 */
export type IdempotencyKeyResolver = (
  context: ExecutionContext,
) => string | undefined | Promise<string | undefined>;

/**
 * What makes a key valid. A key that breaks any rule gets `400`, and so does
 * a key that is not well-formed Unicode (a lone surrogate, which PostgreSQL
 * would keep as U+FFFD: another key's record) or has a NUL character (which
 * PostgreSQL refuses), whatever the rules.
 */
export interface IdempotencyKeyValidation {
  /**
   * Shortest key accepted.
   * @default 1
   */
  minLength?: number;
  /**
   * Longest key accepted, at most 1024, in UTF-16 code units (as
   * JavaScript's `length` counts). Whatever it, a key of more than 1024
   * bytes of UTF-8 (342 CJK characters) gets `400`: no more
   * fits the record's index on PostgreSQL.
   * @default 255
   */
  maxLength?: number;
  /**
   * Pattern the whole key must match.
   * @default /^[\x21-\x7e]+$/ (visible ASCII, no spaces)
   */
  pattern?: RegExp;
  /**
   * Further check, e.g. that the key is a UUID. Return `false` to refuse it.
   * @default none
   */
  validate?: (key: string) => boolean;
}

/**
 * Which fields of the body and the query make up the request fingerprint.
 * The method, the route template and the path parameters always count.
 *
 * A name is a top-level field of an object body (a JSON object, or an
 * instance of a class that a parser of the application's own makes) and a
 * query parameter alike, with the names `qs` gives the handler under it
 * (`tag` selects `tag[]`, `tag[x]` and `[tag]` too); prefix it with `body.`
 * or `query.` to apply it to one of them only. Another body (an array, a
 * `Date`, a `Map`, a `Set`) counts whole.
 *
 * @example
 * // A client's cache-busting `?_=1700000000` and `sentAt` field do not count.
 * @Idempotent({ fingerprint: { exclude: ['query._', 'sentAt'] } })
 */
export interface IdempotencyFingerprintFields {
  /**
   * Only these body fields and query parameters count (the others of either
   * are ignored). @default every field and parameter
   */
  include?: string[];
  /**
   * These body fields and query parameters do not count (e.g. a client
   * timestamp). @default none
   */
  exclude?: string[];
}

/**
 * Computes what counts of a request's query and body yourself: the method,
 * the route and the path parameters (a message's pattern and channel) count
 * besides its value. Two requests with the same key and different
 * fingerprints are refused with `422`.
 */
export type IdempotencyFingerprintFunction = (
  context: ExecutionContext,
) => string | Promise<string>;

/**
 * Decides whether an error response is stored and replayed, from the status
 * the client got and the error the handler threw. A 408, 425 or 429 is never
 * stored, whatever it answers.
 */
export type IdempotencyErrorPolicy = (
  status: number,
  error: unknown,
) => boolean;

/**
 * Which response headers are stored and replayed. `Set-Cookie`, `Date`,
 * `Content-Length` and hop-by-hop headers never are; `Content-Type` always is.
 */
export interface IdempotencyReplayHeaders {
  /** Only these headers are replayed (case-insensitive). @default every header */
  allow?: string[];
  /** These headers are not replayed either (case-insensitive). @default none */
  deny?: string[];
}

/**
 * Options of one decorated route or controller (`@Idempotent({ ... })`). Each
 * one overrides the module-wide option of the same name.
 */
export interface IdempotentOptions {
  /**
   * How long a completed record is kept and replayed. After that, the same key
   * executes the handler again.
   * @default '24h'
   */
  ttl?: IdempotencyDuration;
  /**
   * What a concurrent duplicate does while the first request executes.
   * @default 'reject'
   */
  concurrency?: IdempotencyConcurrencyMode;
  /**
   * In `'wait'` mode, how long a duplicate waits for the first request before
   * it gets `409`. At most `'24d'` (the longest a Node.js timer waits).
   * @default '10s'
   */
  waitTimeout?: IdempotencyDuration;
  /**
   * Deadline of a decorated handler, from the request's arrival. A handler
   * still running then is abandoned: the client gets `503`, the statement it
   * runs is cancelled, its transaction rolls back, the key is freed at once,
   * and nothing the handler does afterwards commits. So is a completion
   * still writing in the handler's transaction (waiting on a lock of its
   * record). At most `'24d'` (the longest a Node.js timer waits).
   * @default '30s'
   */
  transactionTimeout?: IdempotencyDuration;
  /**
   * Scope resolver; keys are unique per scope. A BullMQ processor takes only
   * its own (see src/bullmq/README.md).
   * @default a single global scope (`'global'`); for a BullMQ job, one per
   * queue (`'bullmq:<queueName>'` under BullMQ's default prefix `bull`,
   * `'bullmq:<prefix>:<queueName>'` under another)
   */
  scope?: IdempotencyScopeResolver;
  /**
   * Whether a request without an idempotency key is refused with `400`. When
   * `false`, a keyless request runs the handler normally (still in one
   * transaction) and stores no record.
   * @default true
   */
  required?: boolean;
  /**
   * Seconds announced in the `Retry-After` header of `409` and `503`
   * answers; for a RabbitMQ consumer with `acknowledge`, the seconds before a
   * failed message is requeued.
   * @default 1
   */
  retryAfter?: number;
  /**
   * Derives the key from the request instead of the `Idempotency-Key` header.
   * A BullMQ processor takes only its own: its resolver gets a context whose
   * `getArgByIndex(0)` is the `Job`.
   * @default the header named by `headerName`; for a BullMQ job,
   * `<queueName>:<jobId>`
   */
  key?: IdempotencyKeyResolver;
  /**
   * Rules a key must follow: a key a client or producer sent (or the `key`
   * resolver returned). A message keyed by its place in a log (a Kafka
   * message without a key header) is keyed by the module, which the rules
   * do not apply to.
   * @default 1 to 255 visible ASCII characters
   */
  keyValidation?: IdempotencyKeyValidation;
  /**
   * What makes two requests with the same key "the same request": fields of
   * the body and query parameters to include or exclude, or a function of
   * your own. For a message: its pattern, the subject (topic, channel) it
   * came on, and its data. For a BullMQ job: its queue, its name and its
   * data (a processor takes only its own `fingerprint` option).
   * @default sha256 of the method, the route template, the path parameters,
   * the query (parameter order aside) and the canonical body
   */
  fingerprint?: IdempotencyFingerprintFields | IdempotencyFingerprintFunction;
  /**
   * Error responses that are stored and replayed like successes. `true` stores
   * every 4xx but 408, 425 and 429; a function decides from the status and
   * the error. The handler's writes are rolled back in any case; the error
   * response is stored in a short transaction of its own. Never stored,
   * whatever `true` or a function says: the module's own 503 (nothing
   * happened), and 408 (Request Timeout), 425 (Too Early) and 429 (Too Many
   * Requests), which ask the client to come back later: the key is released
   * and the retry runs the handler. Nor is the error of a handler that met,
   * in its transaction, a failure a retry may not meet and caught it (a
   * deadlock, a serialization failure, a statement, lock or idle timeout,
   * a terminated session: the last of its statements that failed): the
   * client gets the module's 503 with `Retry-After`, nothing commits, and
   * the key is free at once, as for such a handler that returned a success.
   * Set on the module, it applies to routes and GraphQL mutations, not to
   * webhook receivers (see `@IdempotentWebhook()`).
   * @default false (a failed request stores nothing; a retry runs again)
   */
  storeErrors?: boolean | IdempotencyErrorPolicy;
  /**
   * Largest response body (bytes) stored for replay, on every path alike:
   * the body of an HTTP response, the JSON of a GraphQL mutation's result,
   * of a message handler's, a BullMQ job's or an `IdempotencyService.run()`
   * result. A larger one is still returned and its writes committed, but
   * the key is marked "not replayable": a duplicate of an HTTP request gets
   * the original status with an empty body and `Idempotent-Body-Omitted:
   * true`; a duplicate `run()`, GraphQL mutation or message request is
   * refused (`IdempotencyNotReplayableException`), a duplicate event is
   * acknowledged and dropped (never dead-lettered), and a duplicate job
   * completes without a result. The bound keeps one result from
   * filling the store (a DynamoDB item holds 400 KB; a Redis value sits in
   * memory).
   * @default 1048576 (1 MiB)
   */
  maxResponseSize?: number;
  /**
   * Which response headers are replayed.
   * @default every header but the unsafe ones
   */
  replayHeaders?: IdempotencyReplayHeaders;
  /**
   * For RabbitMQ consumers with manual acknowledgement (`noAck: false`): the
   * module acknowledges each message only after its transaction committed
   * (or after dropping a duplicate), and rejects it with requeue (after
   * `retryAfter` seconds) when the handler or the commit fails, so that the
   * broker redelivers it. A message
   * that can never succeed is rejected without requeue (dead-lettered, or
   * dropped when the queue has no dead-letter exchange): one without a key,
   * one with the key of another request, and one whose handler threw a 4xx
   * `HttpException` (e.g. a `ValidationPipe` refusal) other than 408, 409,
   * 425 and 429. The handler must not acknowledge itself.
   *
   * For Kafka consumers (`@nestjs/microservices`' Kafka transport, run with
   * `run: { autoCommit: false }`): the module commits each message's offset
   * (`consumer.commitOffsets`, the next offset) only after its transaction
   * committed, after dropping a duplicate, or after `deadLetter` took it;
   * a failed message's offset is not committed, and kafkajs delivers it
   * again.
   *
   * The application refuses to start when another event handler, with
   * `@Idempotent()` or without, may be handed the same delivery: one of the
   * same pattern on a transport both listen on, or (NATS, Redis with
   * `wildcards`) of a pattern one message matches too (`orders.*` and
   * `orders.paid`). The broker settles a delivery once.
   * @default false
   */
  acknowledge?: boolean;
  /**
   * For message handlers: how many failed attempts of one message (by key,
   * counted in the store, so across redeliveries, instances and restarts)
   * are made before it is handed to `deadLetter` and acknowledged instead
   * of coming back again. Only the handler's own failures count: not an
   * outage of the database, a lost lease, a deadline or a refusal of the
   * module. A message whose handler threw a 4xx `HttpException` (other
   * than 408, 409, 425 and 429) is handed over at once. Needs `deadLetter`.
   * @default undefined: a failing message comes back for as long as it fails
   */
  maxAttempts?: number;
  /**
   * Where a message goes after `maxAttempts` failed attempts: see
   * {@link IdempotencyDeadLetterHandler}. Needs `maxAttempts`.
   * @default undefined: none
   */
  deadLetter?: IdempotencyDeadLetterHandler;
  /**
   * Isolation level of the handler's transaction, which the module begins
   * with `START TRANSACTION ISOLATION LEVEL ...` at the handler's first
   * statement. A transaction the handler's code joins (a savepoint,
   * `@Transactional()` of a transaction library) runs at this level: one
   * that asks for another level is refused or ignored (see
   * src/typeorm/README.md). Under `'SERIALIZABLE'` or
   * `'REPEATABLE READ'`, a serialization failure or a deadlock is answered
   * `503` with `Retry-After`: nothing was written, and the retry runs again.
   * @default the DataSource's `isolationLevel` option, else the server's
   * default (`default_transaction_isolation`, `'READ COMMITTED'` unless
   * configured)
   */
  isolationLevel?: IdempotencyIsolationLevel;
  /**
   * Changes what is stored of each response before it is written (and, with
   * `encryption`, sealed): drop headers, mask fields of the body. Only what
   * is stored and replayed to duplicates changes; the first caller gets the
   * handler's answer as it was. Headers never stored whatever it returns:
   * `Set-Cookie`, `Date`, `Content-Length`, the hop-by-hop ones and the
   * replay header (a replay sets those itself).
   * @default none: the response is stored as sent, minus those headers and
   * those `replayHeaders` leaves out
   */
  redact?: IdempotencyRedactor;
}
