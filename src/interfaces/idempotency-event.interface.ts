/**
 * What happened to a request (or a collection):
 * - `executed`: the handler ran and its writes and record committed;
 * - `replayed`: a duplicate got the stored response;
 * - `conflict`: a duplicate arrived while the same request executed (409);
 * - `mismatch`: the key was reused for a different request (422);
 * - `not-replayable`: a duplicate of a request whose response was not stored
 *   (over HTTP it gets the original status with its body omitted; a message,
 *   job, `run()` or GraphQL mutation is refused with 422);
 * - `stored-error`: an error response was stored by the error policy;
 * - `timeout`: the handler ran past its deadline (`transactionTimeout`) and was
 *   abandoned (503), the server cancelled one of its statements, or the
 *   handler failed while one of its steps was still under way at the
 *   deadline (503, its key left to its lease);
 * - `failed`: the transaction could not begin or commit, or the `redact`
 *   hook threw (503), or a message handler threw (its message is then
 *   requeued or rejected);
 * - `lease-lost`: the request's claim was taken over while it ran (its lease
 *   ran out, or its instance's presence session dropped): nothing of it
 *   committed (503);
 * - `abandoned`: garbage collection found the recovery points (`steps`) of a
 *   key whose request never completed, and deletes them: their side effects
 *   (a charge) have no record of the request; reconcile them;
 * - `gc`: a garbage collection ran.
 */
export type IdempotencyEventType =
  | 'executed'
  | 'replayed'
  | 'conflict'
  | 'mismatch'
  | 'not-replayable'
  | 'stored-error'
  | 'timeout'
  | 'failed'
  | 'lease-lost'
  | 'abandoned'
  | 'gc';

/**
 * An event of the module, given to the `onEvent` option (e.g. to count
 * replays and conflicts in your metrics) and logged.
 */
export interface IdempotencyEvent {
  /** What happened. */
  readonly type: IdempotencyEventType;
  /** Scope of the request (absent for `gc`). */
  readonly scope?: string;
  /** Idempotency key of the request (absent for `gc` and keyless requests). */
  readonly key?: string;
  /** HTTP method of the request. */
  readonly method?: string;
  /**
   * Route of the request, e.g. `/payments/:id`: the pattern the platform
   * matched, less the global prefix (`/v1/orders` under URI versioning).
   */
  readonly path?: string;
  /**
   * Status of the response sent, where there is one: the module's own
   * answer (`409`, `422`, and `503` for a `timeout`, a `lease-lost` and a
   * `failed` claim, transaction or completion, on every transport alike),
   * or the handler's stored or replayed one. None for a message handler
   * that threw (`failed`), `abandoned` and `gc`.
   */
  readonly status?: number;
  /** Milliseconds the request (or the collection) took. */
  readonly durationMs?: number;
  /** Records deleted (`gc` only). */
  readonly removed?: number;
  /** The error behind a `timeout`, `failed` or `lease-lost` event. */
  readonly error?: unknown;
  /**
   * The completed steps of the key and their results (`abandoned` only);
   * a result that could not be opened, or of a step that ran without a
   * result its store could keep (too large), is `undefined`, with
   * `unreadable` saying why.
   */
  readonly steps?: ReadonlyArray<{
    readonly step: string;
    readonly result: unknown;
    readonly unreadable?: string;
  }>;
}
