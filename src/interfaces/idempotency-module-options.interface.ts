import type { IdempotencyEncryptionOptions } from './idempotency-privacy.interface.js';
import type { PostgresAdapter } from './postgres-adapter.interface.js';
import type { IdempotencyEvent } from './idempotency-event.interface.js';
import type {
  IdempotencyDuration,
  IdempotentOptions,
} from './idempotency-options.interface.js';
import type { IdempotentFetchOptions } from './idempotent-fetch.interface.js';

/**
 * Garbage collection of expired records, run by the module on a schedule
 * (`@nestjs/schedule`). Safe with any number of application instances: each
 * batch skips the rows another instance is deleting.
 */
export interface IdempotencyGcOptions {
  /**
   * Time between two collections. Ignored when `cron` is set. At most
   * `'24d'` (the longest a Node.js timer waits).
   * @default '5m'
   */
  interval?: IdempotencyDuration;
  /**
   * Cron expression for collections instead of an interval, e.g. `'0 * * * *'`.
   * @default none
   */
  cron?: string;
  /**
   * Rows deleted per statement (each batch is a short transaction of its own).
   * @default 1000
   */
  batchSize?: number;
  /**
   * Time budget of one collection: no new batch starts after it. What is left
   * is collected next time.
   * @default '10s'
   */
  maxDuration?: IdempotencyDuration;
}

/**
 * How spans and the module's log lines carry the key of a request (never
 * metrics, whose attributes are the outcome and the route only). Log lines
 * follow it also with `telemetry: false`, as `'hash'`.
 * - `'hash'`: `idempotency.key.hash` (logs: `key_hash=`), the first 16 hex
 *   digits of the sha256 of the key; enough to find every attempt of one
 *   key, without the key itself (a guessable key, such as `invoice:42`, can
 *   be guessed back); the scope is left out;
 * - `'raw'`: `idempotency.key` and `idempotency.scope` (logs: `scope=`,
 *   `key=`) as they are (the scope may be a user or tenant id);
 * - `'none'`: neither.
 */
export type IdempotencyTelemetryKeys = 'hash' | 'raw' | 'none';

/**
 * OpenTelemetry spans and metrics of the module (see
 * src/telemetry/README.md). They are recorded through `@opentelemetry/api`,
 * an optional peer dependency, with the providers the application registered.
 */
export interface IdempotencyTelemetryOptions {
  /**
   * How spans and log lines carry the idempotency key.
   * @default 'hash'
   */
  keys?: IdempotencyTelemetryKeys;
}

/**
 * Module-wide options of `IdempotencyModule.forRoot()` / `forRootAsync()`.
 */
export interface IdempotencyModuleOptions extends IdempotentOptions {
  /**
   * Scheduled deletion of expired records; `false` disables it (for teams that
   * run `IdempotencyCollector.collect()` elsewhere).
   * @default { interval: '5m', batchSize: 1000, maxDuration: '10s' }
   */
  gc?: false | IdempotencyGcOptions;
  /**
   * Called with every event of the module (executed, replayed, conflict,
   * mismatch, stored error, timeout, GC run, ...), e.g. to feed metrics.
   * Must not throw (what it throws, or the promise it returns rejects
   * with, is logged as a warning and ignored).
   * @default none (events are only logged)
   * @example
   * onEvent: (event) => idempotencyEvents.inc({ type: event.type })
   */
  onEvent?: (event: IdempotencyEvent) => void;
  /**
   * The data library the PostgreSQL store (the store without a `store`
   * option) works through: the handler writes through it, and the record
   * commits in the same transaction of it. An adapter of
   * `nestjs-idempotency/prisma`, `/drizzle`, `/kysely` or `/pg`, or
   * `TypeOrmIdempotencyAdapter` of `nestjs-idempotency/typeorm` for a named
   * DataSource.
   * @default TypeORM, on the DataSource named by `dataSource`
   * @example
   * adapter: new PgIdempotencyAdapter({ poolToken: PG_POOL })
   */
  adapter?: PostgresAdapter;
  /**
   * Name of the TypeORM DataSource to use, as given to
   * `TypeOrmModule.forRoot({ name })`. The module borrows connections from
   * this DataSource's pool; its only connection of its own is the presence
   * session (see `presence`). The same as `adapter: new
   * TypeOrmIdempotencyAdapter({ dataSource })`; not with another adapter.
   * @default the default DataSource
   */
  dataSource?: string;
  /**
   * Request header that carries the idempotency key, and the key header of
   * messages (NATS and RabbitMQ headers, MQTT 5 user properties, Kafka
   * headers), read by the same rules: sent once (twice, or under two
   * spellings of its name, it is refused as repeated), a token or a quoted
   * sf-string (`"k-1"` is the key `k-1`), an empty one refused.
   * @default 'Idempotency-Key'
   */
  headerName?: string;
  /**
   * Response header set to `true` on every replayed HTTP response (and
   * documented in the OpenAPI document). Some clients expect
   * `Idempotency-Replayed`. A browser client reads it only if the
   * application exposes it through CORS (`exposedHeaders`).
   * @default 'Idempotent-Replayed'
   */
  replayHeaderName?: string;
  /**
   * Where the `type` of the module's problem answers (400, 409, 415, 422,
   * 503) points: with a base URL, the type of the problem `<slug>` is
   * `${problemTypeBaseUrl}<slug>` (the base used as given, so end it with
   * `/` or `#`), e.g. `https://docs.example.com/errors/key-reused`, for
   * pages of your documentation that explain each one. Applies to HTTP
   * answers, the `type` in the extensions of GraphQL errors (their `code`
   * does not change) and the OpenAPI document. The slugs: `missing-key`,
   * `invalid-key`, `request-in-progress`, `key-reused`, `not-replayable`,
   * `unreadable-body`, `unavailable`. Must be an absolute URL.
   * @default undefined (URNs: `urn:idempotency:<slug>`)
   * @example
   * problemTypeBaseUrl: 'https://docs.example.com/errors/'
   */
  problemTypeBaseUrl?: string;
  /**
   * How long a claim stays owned without renewal. The instance renews the
   * leases of every request it runs in one statement every `lease / 3`
   * (never past a request's `transactionTimeout`); a key of an instance that
   * died is claimable again after at most this long (at once while
   * `presence` tells that the instance is gone).
   * At most `'24d'` (the longest a Node.js timer waits).
   * @default '15s'
   */
  lease?: IdempotencyDuration;
  /**
   * The instance's presence session: one dedicated connection (not from the
   * pool) holding a session advisory lock on the instance's id, so that
   * another instance takes the keys of a crashed one over at once, and
   * listening for the completions that wake `'wait'`-mode duplicates.
   * `true` connects with the pool's own settings; `{ url }` with
   * another URL, such as a direct or session-mode one when the pool
   * goes through PgBouncer in transaction pooling (where a session lock
   * means nothing); `false` turns it off: crashes are then recovered when
   * leases run out, and waiters poll. The adapter's own `presence`, when
   * it sets one, takes its place (see `PostgresAdapterOptions`).
   * @default true
   */
  presence?: boolean | { url: string };
  /**
   * Whether decorated HTTP routes are documented in the OpenAPI document of
   * `@nestjs/swagger`, when that package is installed: the key header
   * (required or not, its length and pattern), the replay headers, and the
   * module's 400, 409, 415, 422 and 503 problem responses, next to the
   * route's own responses.
   * Without `@nestjs/swagger` nothing is loaded either way.
   * @default true
   */
  openApi?: boolean;
  /**
   * OpenTelemetry spans (claim, handler, commit) and metrics (outcomes,
   * durations), when `@opentelemetry/api` is installed: the module loads it
   * once at startup, and records through the tracer and meter providers the
   * application registered (none registered: the API's no-ops). Without the
   * package, or with `false`, nothing is loaded and nothing recorded.
   * @default true (`{ keys: 'hash' }`)
   */
  telemetry?: boolean | IdempotencyTelemetryOptions;
  /**
   * How `IdempotencyContext.fetch()` calls downstream services: the header
   * that carries the derived key, the retries, the timeout of one attempt,
   * and the `fetch` to use (`fetchFromHttpService()` for `@nestjs/axios`).
   * A call's own `idempotency` options override these.
   * @default { headerName: 'Idempotency-Key', retry: { attempts: 5, baseDelayMs: 100, maxDelayMs: 5000, deadlineMs: 30000 }, timeoutMs: 10000, fetch: globalThis.fetch }
   */
  outgoing?: IdempotentFetchOptions;
  /**
   * Encrypts what is stored at rest (AES-256-GCM): the body and headers of
   * each stored response and the result of each step, bound to their record
   * (scope and key), so that a value copied to another record cannot be
   * opened. A record that cannot be opened (its key not in the ring,
   * altered, moved, or stored before encryption was on) is answered with a
   * 503 and logged, never replayed. Works on every store.
   * @default none: stored in the clear
   */
  encryption?: IdempotencyEncryptionOptions;
  /**
   * A response header that states until when the key of a request is kept
   * (an HTTP-date: the request's arrival plus `ttl`), on the first response
   * and, stored with it, on every replay; not on an error whose key was
   * released (thrown or returned), nor on the module's refusals, but for an
   * error status a handler sends itself (`@Res({ passthrough: true })`),
   * whose headers are out before the module sees it. `true` names it
   * `Idempotency-Expires`; a string names it.
   * @default false
   */
  expiresHeader?: boolean | string;
}
