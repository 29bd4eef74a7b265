import type {
  AbandonedKey,
  IdempotencyStore,
  Lease,
  StepLease,
  StoredResponse,
} from '../interfaces/idempotency-store.interface.js';
import { messageOf } from './error-message.js';

/**
 * @internal How what the module stores is sealed before it is written and
 * opened as it is read back (the `encryption` option's key ring): bound to
 * the record it belongs to, so that a sealed value moved to another record
 * cannot be opened there.
 */
export interface RecordSealing {
  sealResponse(
    scope: string,
    key: string,
    response: StoredResponse,
  ): StoredResponse;
  /** @throws when the response cannot be opened (unknown key, tampered, moved). */
  openResponse(
    scope: string,
    key: string,
    response: StoredResponse,
  ): StoredResponse;
  /**
   * @param binary whether the store keeps bytes (`binaryStepResults`): the
   * result is then sealed in bytes, else as text.
   */
  sealStep(
    scope: string,
    key: string,
    step: string,
    result: unknown,
    binary?: boolean,
  ): unknown;
  /** @throws when the result cannot be opened. */
  openStep(scope: string, key: string, step: string, result: unknown): unknown;
}

/**
 * @internal `store` as the module sees it with `sealing`: responses and
 * step results sealed on their way in and opened on their way out. A record
 * that cannot be opened is never replayed: the claim (or the step's read)
 * fails with a 503, and `warn` says why. Every other call goes to `store`
 * unchanged, whatever it has.
 */
export function sealedStore(
  store: IdempotencyStore,
  sealing: RecordSealing,
  warn: (message: string, lease: Lease) => void,
): IdempotencyStore {
  // The caller answers the error with a 503 (a failed claim, a failed
  // statement of the module's own): its message goes to the log only.
  const unreadable = (lease: Lease, what: string, error: unknown) => {
    const message = `The stored ${what} cannot be opened (${messageOf(error)}), so it is answered with a 503 until it expires, ${what === 'response' ? 'is reset, ' : ''}or the key that sealed it is back in the ring`;
    warn(message, lease);
    return new Error(message);
  };
  const overrides: Partial<IdempotencyStore> = {
    async claim(request) {
      const outcome = await store.claim(request);
      if (
        outcome.state !== 'finished' ||
        outcome.record.status === 'not_replayable'
      ) {
        return outcome;
      }
      const { record } = outcome;
      let response: StoredResponse;
      try {
        response = sealing.openResponse(
          request.scope,
          request.key,
          record.response,
        );
      } catch (error) {
        throw unreadable(request, 'response', error);
      }
      return { state: 'finished', record: { ...record, response } };
    },
    complete(lease, completion, transaction) {
      const { response } = completion;
      return store.complete(
        lease,
        'body' in response
          ? {
              ...completion,
              response: sealing.sealResponse(lease.scope, lease.key, response),
            }
          : completion,
        transaction,
      );
    },
    async readStep(lease: StepLease, step: string) {
      const stored = await store.readStep(lease, step);
      if (!stored) {
        return stored;
      }
      try {
        return {
          result: sealing.openStep(lease.scope, lease.key, step, stored.result),
        };
      } catch (error) {
        throw unreadable(
          lease,
          `result of step ${JSON.stringify(step)}`,
          error,
        );
      }
    },
    saveStep(lease, step, result, ttlMs) {
      return store.saveStep(
        lease,
        step,
        sealing.sealStep(
          lease.scope,
          lease.key,
          step,
          result,
          store.binaryStepResults === true,
        ),
        ttlMs,
      );
    },
    collect(batchSize, abandoned) {
      return store.collect(batchSize, (found: AbandonedKey) => {
        const steps: Array<AbandonedKey['steps'][number]> = [];
        for (const { step, result } of found.steps) {
          try {
            steps.push({
              step,
              result: sealing.openStep(found.scope, found.key, step, result),
            });
          } catch (error) {
            // Reported by its name, without its result: the step's effect
            // happened all the same.
            const reason = messageOf(error);
            warn(
              `The stored result of step ${JSON.stringify(step)} of an abandoned key cannot be opened (${reason}): it is reported without its result`,
              { ...found, owner: '' },
            );
            steps.push({ step, result: undefined, unreadable: reason });
          }
        }
        abandoned({ ...found, steps });
      });
    },
  };
  return new Proxy(store, {
    get(target, property) {
      if (Object.hasOwn(overrides, property)) {
        return overrides[property as keyof IdempotencyStore];
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function'
        ? (value as (...args: unknown[]) => unknown).bind(target)
        : value;
    },
  });
}
