import type { Completion } from '../interfaces/idempotency-store.interface.js';

/**
 * @internal A completion whose response is larger than a store keeps: its
 * status only, recorded as not replayable, as a response over the module's
 * `maxResponseSize` is (a duplicate HTTP request gets the original status
 * with an empty body and `Idempotent-Body-Omitted: true`; see that
 * option).
 */
export function notReplayable(completion: Completion): Completion {
  return {
    status: 'not_replayable',
    response: { status: completion.response.status },
    ttlMs: completion.ttlMs,
  };
}
