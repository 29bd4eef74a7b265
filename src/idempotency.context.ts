import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { handlerContexts } from './core/handler-context.js';
import { HandlerTransactions } from './interfaces/handler-transaction.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import type { ResolvedIdempotencyOptions } from './idempotency.options.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import type { IdempotencyIsolationLevel } from './interfaces/idempotency-options.interface.js';
import type { IdempotentFetchInit } from './interfaces/idempotent-fetch.interface.js';
import { idempotentFetch } from './outgoing/idempotent-fetch.js';

/**
 * Explicit access to the transaction of the decorated handler being executed.
 *
 * Repositories and managers of the application already write through this
 * transaction while a decorated handler runs; inject `IdempotencyContext` in
 * code that prefers to say so.
 *
 * @example
 * constructor(private readonly idempotency: IdempotencyContext) {}
 * async create(dto: CreatePaymentDto) {
 *   return this.idempotency.manager.save(Payment, dto);
 * }
 */
@Injectable()
export class IdempotencyContext<Transaction = unknown> {
  constructor(
    @Inject(HandlerTransactions)
    private readonly transactions: HandlerTransactions<EntityManager>,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  /** Whether the current code runs inside a decorated handler's transaction. */
  get isActive(): boolean {
    return handlerContexts.getStore() !== undefined;
  }

  /**
   * The `EntityManager` of the current handler's transaction.
   * @throws IdempotencyConfigurationError outside a decorated handler, or
   * with a store other than PostgreSQL (the handler has no transaction).
   */
  get manager(): EntityManager {
    return this.current().transaction.manager as EntityManager;
  }

  /**
   * The current handler's transaction, as the PostgreSQL store's data
   * library gives it: what `Transaction` names, the type of the adapter's
   * entry (`PrismaTransaction`, `DrizzleTransaction`, `KyselyTransaction`,
   * `PgTransaction`; TypeORM's `EntityManager`, also as `manager`). Its
   * first statement begins the transaction; the record commits in it.
   * @throws IdempotencyConfigurationError outside a decorated handler, or
   * with a store other than PostgreSQL (the handler has no transaction).
   * @example
   * constructor(private readonly idempotency: IdempotencyContext<PgTransaction>) {}
   * create(dto: CreatePaymentDto) {
   *   return this.idempotency.transaction.query('INSERT INTO payments (amount) VALUES ($1)', [dto.amount]);
   * }
   */
  get transaction(): Transaction {
    return this.current().transaction.manager as Transaction;
  }

  /**
   * The idempotency key of the current request, or `undefined` for a keyless
   * request on a route with `required: false`.
   * @throws IdempotencyConfigurationError outside a decorated handler.
   */
  get key(): string | undefined {
    return this.current().key;
  }

  /**
   * The scope of the current request.
   * @throws IdempotencyConfigurationError outside a decorated handler.
   */
  get scope(): string {
    return this.current().scope;
  }

  /**
   * A recovery point for a side effect outside the database (a payment
   * gateway, an e-mail): runs `fn` once per key. Its result is committed at
   * once in a short transaction of its own, so that when the request is
   * retried (after a crash, a timeout or an error of a later step), `step()`
   * returns the stored result instead of running `fn` again, and the handler
   * resumes at the first unfinished step. The handler's own writes and the
   * idempotency record still commit together at the end; the stored steps of
   * a key are deleted then (or when they expire, after `ttl`).
   *
   * The result must be a JSON value (objects, arrays, strings, numbers,
   * booleans, `null`); `undefined`, and any value JSON has no text for (a
   * function, a symbol), is stored and returned as `null`. One that JSON
   * cannot hold (a `BigInt`, a cycle such as an HTTP client's response
   * object) is kept as a mark that the step ran: the request and its every
   * retry with the same key get an `IdempotencyStepResultNotJsonException`
   * (500), the step never run again. Call the downstream
   * service with `deriveKey(name)` as its own idempotency key, so that the
   * call itself is idempotent if the process dies between the call and the
   * commit of its result.
   *
   * A step holds no connection while `fn` runs: it reads and commits its
   * result in a statement of its own each, fenced by the request's claim (a
   * request whose claim was taken over gets `503`). Run steps before the
   * handler's first database statement: a step that runs while the
   * handler's transaction is open keeps that connection during `fn`, and
   * the module logs a warning once per route. Give each step of a handler
   * a name of its own, and call it once per execution.
   *
   * @throws IdempotencyConfigurationError, a programming error, before `fn`
   * runs: outside a decorated handler, for a request without a key, for an
   * empty name, for a name that takes, with the request's scope and key,
   * more than 2,560 bytes of UTF-8 (what every store keeps of a step), for
   * one with a NUL (U+0000) or a lone surrogate, or for a name called a
   * second time in one execution (each step once: a retry resuming after
   * it is another execution).
   * @example
   * const charge = await this.idempotency.step('charge', () =>
   *   this.gateway.charge(dto.amount, { idempotencyKey: this.idempotency.deriveKey('charge') }),
   * );
   */
  async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    return this.current().step(name, fn);
  }

  /**
   * The idempotency key for a downstream call made by step `name`, to send
   * to the downstream service (a payment gateway's `Idempotency-Key`).
   *
   * It is unique to the request's scope, its key, its fingerprint, the
   * key's generation and `name`: another tenant (scope), another request
   * under the same key, and the same key used again after its record
   * expired each derive another one, and share no downstream effect. It is
   * stable across every retry of the same request until the key expires:
   * after a crash, a lost lease, a timeout, or a failed attempt whose call
   * went through but whose step never committed, the retry sends the same
   * key, and the downstream service deduplicates the call.
   *
   * Call it inside `step()` (or use `fetch()`): a step binds the key to its
   * request before it runs, so that no other request under the key runs
   * until it expires, even if this attempt's instance dies during the
   * call. A key derived outside a step binds it only when the attempt
   * fails and releases it, not when its instance dies.
   *
   * Its format: a UUID of version 8 (RFC 9562), 36 characters of lower-case
   * hexadecimal and hyphens, made of the SHA-256 of those parts; a gateway
   * that asks for a UUID, or caps its keys at 40 to 255 characters, takes
   * it. It tells nothing of the client's key.
   *
   * @throws IdempotencyConfigurationError outside a decorated handler, for
   * a request without a key, or for an empty name.
   * @example
   * this.gateway.charge(dto.amount, {
   *   idempotencyKey: this.idempotency.deriveKey('charge'),
   * });
   */
  deriveKey(name: string): string {
    return this.current().deriveKey(name);
  }

  /**
   * An outgoing HTTP call as the recovery point `name` (see {@link step}):
   * `fetch(input, init)` with `deriveKey(name)` in the downstream service's
   * idempotency header, sent again with that same key on a network error,
   * a timeout, 409, 429 or a 5xx (but 501 and 505, and a replayed error),
   * with exponential backoff and full jitter or the answer's `Retry-After`,
   * within the attempts of the `retry` options and the handler's deadline.
   * Its answer (2xx or 3xx) is stored as the step's result: a retry of the
   * request gets the same `Response` back without calling again. Its
   * `statusText` is the downstream's reason phrase when a `Response` takes
   * it (characters up to 0xFF), else `''`.
   *
   * Options come from the module's `outgoing` option and the init's
   * `idempotency` field. With OpenTelemetry, the call is an
   * `idempotency.call` span under the handler's, its key hashed as the
   * module's own keys are.
   *
   * @throws IdempotencyDownstreamRefusedException (502) for a final error
   * answer (another 4xx, a replayed error): catch it to answer otherwise.
   * @throws IdempotencyDownstreamUnavailableException (503, the client
   * retries with the same key) when no final answer came in time.
   * @throws IdempotencyConfigurationError outside a decorated handler, for
   * a request without a key, a relative URL or one whose scheme is not
   * `http:` or `https:` (`ftp:`, `file:`, `data:`), a body that cannot be sent
   * again as it is (a stream, an async iterable, `FormData`), or a call
   * that fetch refuses to build (a URL with credentials, a GET or HEAD with
   * a body, an invalid header; the platform's TypeError is its `cause`),
   * before anything is sent, and derives no key (the attempt's failure
   * frees the key, as one that called nothing does); or at its first
   * attempt, never sent again, for a call that Node.js's fetch builds but
   * will not send (an `Expect`, `Transfer-Encoding`, `Upgrade` or
   * `Keep-Alive` header, a `Content-Length` that is not the body's).
   * @example
   * const charge = await this.idempotency.fetch('charge', `${gateway}/charges`, {
   *   method: 'POST',
   *   headers: { 'content-type': 'application/json' },
   *   body: JSON.stringify({ amount: dto.amount }),
   * });
   * const { id } = (await charge.json()) as { id: string };
   */
  fetch(
    name: string,
    input: string | URL,
    init: IdempotentFetchInit = {},
  ): Promise<Response> {
    return idempotentFetch(
      this.current(),
      name,
      input,
      init,
      this.options.outgoing,
    );
  }

  /**
   * Runs `fn` once the handler's transaction and its idempotency record have
   * committed: for side effects that must not happen for writes that roll
   * back (an e-mail, an event on a broker). `fn` does not run when the
   * transaction rolls back (the handler threw, its lease was lost, it was
   * abandoned at its deadline), nor for a duplicate (a replay never runs the
   * handler).
   *
   * Callbacks run one after the other, in the order they were added, after
   * the COMMIT and without delaying the response (which the module sends
   * once the commit returned): the client may get its answer before or
   * while they run. What they throw is logged and changes nothing of the
   * request. They run outside of the handler's transaction. A crash after
   * the commit loses them: for effects that must happen, write an outbox
   * row in the handler's transaction instead.
   *
   * With a store other than PostgreSQL there is no transaction: `fn` runs
   * once the store has completed the record, and not when the handler
   * failed.
   *
   * @throws IdempotencyConfigurationError outside a decorated handler, or
   * once its transaction has ended.
   * @example
   * await this.payments.save(payment);
   * this.idempotency.afterCommit(() => this.mailer.sendReceipt(payment));
   */
  afterCommit(fn: () => unknown): void {
    if (typeof fn !== 'function') {
      throw new IdempotencyConfigurationError(
        `IdempotencyContext.afterCommit() takes a function, not ${JSON.stringify(fn)}.`,
      );
    }
    this.current().transaction.onEnd((outcome) =>
      outcome.committed ? fn() : undefined,
    );
  }

  /**
   * Runs `fn` in a transaction of its own, on another connection of the
   * pool, that commits when `fn` resolves (or rolls back when it throws),
   * whatever becomes of the handler's transaction afterwards: for an audit
   * row that must survive the handler's failure. Inside `fn`, the
   * application's repositories and DataSource behave as outside of a
   * decorated handler: write through the `manager` it is given.
   *
   * It takes a second connection of the pool while the handler may hold
   * one: keep it short, never nest one in another, and never write in it
   * rows the handler's transaction wrote (it would wait for the handler's
   * locks until the deadline). Outside a decorated handler it is
   * `dataSource.transaction()`.
   *
   * `fn` gets the data library's handle of the new transaction: TypeORM's
   * `EntityManager` by default; with another adapter, annotate it with the
   * type of its entry (`async (tx: DrizzleTransaction<typeof db>) => ...`).
   *
   * @param isolationLevel of the new transaction; by default, the
   * adapter's `isolationLevel`, on TypeORM the DataSource's
   * `isolationLevel` option, else the server's default.
   * @example
   * await this.idempotency.newTransaction((manager) =>
   *   manager.insert(AuditEntry, { action: 'payment.attempted', key: this.idempotency.key }),
   * );
   */
  newTransaction<T, Handle = EntityManager>(
    fn: (manager: Handle) => Promise<T>,
  ): Promise<T>;
  newTransaction<T, Handle = EntityManager>(
    isolationLevel: IdempotencyIsolationLevel,
    fn: (manager: Handle) => Promise<T>,
  ): Promise<T>;
  newTransaction<T, Handle = EntityManager>(
    levelOrFn: IdempotencyIsolationLevel | ((manager: Handle) => Promise<T>),
    fn?: (manager: Handle) => Promise<T>,
  ): Promise<T> {
    const transactions = this.transactions as HandlerTransactions<Handle>;
    return typeof levelOrFn === 'function'
      ? transactions.newTransaction(undefined, levelOrFn)
      : transactions.newTransaction(levelOrFn, fn!);
  }

  private current() {
    const tx = handlerContexts.getStore();
    if (!tx) {
      throw new IdempotencyConfigurationError(
        'IdempotencyContext was used outside of an @Idempotent() handler.',
        'Use it only in code called from a handler decorated with @Idempotent().',
        'Check `isActive` first in code that also runs elsewhere.',
      );
    }
    return tx;
  }
}
