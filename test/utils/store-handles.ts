import type {
  ClaimOutcome,
  ClaimRequest,
  IdempotencyStore,
  Lease,
  StepLease,
} from '../../src/interfaces/idempotency-store.interface.js';

const generations = new WeakMap<ClaimRequest, string>();

/**
 * The generation that the claim `request` was granted with, through a store
 * of {@link asTheModuleCallsIt}.
 */
export function generationOf(request: ClaimRequest): string {
  const generation = generations.get(request);
  if (generation === undefined) {
    throw new Error(`The claim of ${request.key} was not granted`);
  }
  return generation;
}

/**
 * `store` as the module calls it, for tests that drive a store by hand with
 * their claim requests: the handle a claim returns (`ClaimOutcome.lease`)
 * is kept, and handed back in place of its request to every later call for
 * that claim, as the executor does. The outcome a test sees is the claim's
 * state alone (its generation empty: {@link generationOf} tells it). A lease the test builds itself (bare, or another owner's) is
 * passed as it is.
 */
export function asTheModuleCallsIt<S extends IdempotencyStore>(store: S): S {
  const handles = new WeakMap<object, StepLease>();
  const handle = <L extends Lease>(lease: L): L =>
    (handles.get(lease) as L | undefined) ?? lease;
  const calls: Partial<IdempotencyStore> = {
    claim: async (request: ClaimRequest) => {
      const outcome = await store.claim(request);
      if (outcome.state !== 'claimed') {
        return outcome;
      }
      if (typeof outcome.generation !== 'string' || !outcome.generation) {
        throw new Error(
          `The claim of ${request.key} returned no generation: ${JSON.stringify(outcome)}`,
        );
      }
      generations.set(request, outcome.generation);
      if (outcome.lease !== undefined) {
        handles.set(request, outcome.lease);
      }
      // The state alone, as the tests compare it.
      return { state: 'claimed' } as ClaimOutcome;
    },
    complete: (lease, completion, transaction) =>
      store.complete(handle(lease), completion, transaction),
    release: (lease, bind) => store.release(handle(lease), bind),
    bind: (lease) => store.bind(handle(lease)),
    readStep: (lease, step) => store.readStep(handle(lease), step),
    saveStep: (lease, step, result, ttlMs) =>
      store.saveStep(handle(lease), step, result, ttlMs),
    notify: (leases) => store.notify(leases.map(handle)),
  };
  return new Proxy(store, {
    get(target, property) {
      const call = calls[property as keyof IdempotencyStore];
      if (call !== undefined) {
        return call;
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function'
        ? (value as (...args: unknown[]) => unknown).bind(target)
        : value;
    },
  });
}
