/**
 * Thrown by `IdempotencyAdmin` for a request it cannot carry out: bad
 * input (an empty key, a limit out of range, a cursor of no page), or one
 * of the cases its subclasses name. The message says what is wrong.
 */
export class IdempotencyAdminError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * Bad input, refused before the store is asked anything: an empty scope or
 * key, or one holding a NUL character or a lone surrogate (not well-formed
 * Unicode), a limit or batch size out of range, an unknown status, an
 * invalid date, a cursor of no page (or holding a NUL character or a lone
 * surrogate). The command line exits 2 on it, as on any other usage error.
 */
export class IdempotencyAdminInputError extends IdempotencyAdminError {}

/** The store lacks the operation asked for (a custom store's optional one). */
export class IdempotencyAdminUnsupportedError extends IdempotencyAdminError {
  constructor(
    /** The store operation it lacks, e.g. `resetRecord`. */
    readonly operation: string,
    store: string,
  ) {
    super(
      `The idempotency store ${store} does not implement \`${operation}()\`, which this operation needs. Implement it (see IdempotencyStore), or operate on the store's own data.`,
    );
  }
}

/** No record holds the key in the scope. */
export class IdempotencyRecordNotFoundError extends IdempotencyAdminError {
  constructor(
    readonly scope: string,
    readonly key: string,
  ) {
    super(`No idempotency record holds key "${key}" in scope "${scope}".`);
  }
}

/**
 * A reset refused: an attempt owns the key and its lease is live. Retry
 * once `leaseMs` passed (a hung handler stops renewing it), or force the
 * reset, which fences the owner's completion out.
 */
export class IdempotencyLeaseHeldError extends IdempotencyAdminError {
  constructor(
    readonly scope: string,
    readonly key: string,
    /** How long the owner's lease runs unless renewed (ms). */
    readonly leaseMs: number,
    readonly owner?: string,
  ) {
    super(
      `Key "${key}" in scope "${scope}" is being executed: its owner's lease runs ${Math.ceil(leaseMs)} ms more. Wait for it, or force the reset (the running attempt is then fenced out: its completion is refused and its request answered 503).`,
    );
  }
}
