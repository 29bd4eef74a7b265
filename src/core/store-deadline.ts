/**
 * @internal The least time a call of the store is given, however close the
 * attempt's deadline: one round trip takes milliseconds, and a store that
 * has not answered in this time is out of reach. Its client may hold the
 * command meanwhile (ioredis through its reconnections, the AWS SDK with
 * no request timeout of its own), and nothing else would end the wait.
 */
export const STORE_CALL_MIN_MS = 1_000;

/**
 * @internal Raised when a call of the store did not answer in its time:
 * the call may still land (its client still holds it), so its outcome is
 * unknown. Every write of a claim is fenced by its owner token, so that one
 * landing late changes nothing once the claim ended; a claim that lands
 * late is released by the executor.
 */
export class StoreTimeoutError extends Error {
  constructor(call: string, ms: number) {
    super(
      `The idempotency store did not answer the ${call} within ${ms} ms (unreachable?): its outcome is unknown`,
    );
    this.name = 'StoreTimeoutError';
  }
}

/**
 * @internal How long a call of the store made for an attempt may take: until
 * the attempt's `deadline` (epoch ms), and at least
 * {@link STORE_CALL_MIN_MS}, so that a call sent just before the deadline
 * (a completion after a handler that took nearly all of its time) still has
 * a round trip's time.
 */
export function storeCallMs(deadline: number): number {
  return Math.max(STORE_CALL_MIN_MS, deadline - Date.now());
}

/** How often the bounds of the calls under way are looked at. */
const TICK_MS = 100;

/** A call under way: when its time is up, and what fails it then. */
interface PendingCall {
  readonly at: number;
  readonly expire: () => void;
}

/**
 * The calls under way, looked at by one interval timer while there are
 * any: a request costs no timer of its own (see `Execution`'s one timer),
 * whatever the number of calls in flight.
 */
const pending = new Set<PendingCall>();
let ticker: NodeJS.Timeout | undefined;

function tick(): void {
  const now = Date.now();
  for (const call of pending) {
    if (call.at <= now) {
      pending.delete(call);
      call.expire();
    }
  }
  if (pending.size === 0) {
    clearInterval(ticker);
    ticker = undefined;
  }
}

/**
 * @internal What `call` resolves to, or a {@link StoreTimeoutError} once
 * `ms` passed without an answer (a tick later at most), whatever the
 * store's client does. The call is not cancelled (no client can take a
 * command back once sent): what it does when it lands is the caller's to
 * make harmless.
 * @param name what the call is, as the error names it.
 */
export function withinStoreTime<T>(
  call: Promise<T>,
  ms: number,
  name: string,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const entry: PendingCall = {
      at: Date.now() + ms,
      expire: () => reject(new StoreTimeoutError(name, ms)),
    };
    pending.add(entry);
    // Not unref'd: the answer of a request (or of `run()`) waits on it.
    ticker ??= setInterval(tick, TICK_MS);
    call.then(
      (value) => {
        pending.delete(entry);
        resolve(value);
      },
      (error: unknown) => {
        pending.delete(entry);
        reject(error as Error);
      },
    );
  });
}
