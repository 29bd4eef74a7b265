import type { Completion } from '../interfaces/idempotency-store.interface.js';

/**
 * @internal A completion whose response is larger than a store keeps: its
 * status only, recorded as not replayable (a duplicate gets `422`, as for a
 * response over the module's `maxResponseSize`).
 */
export function notReplayable(completion: Completion): Completion {
  return {
    status: 'not_replayable',
    response: { status: completion.response.status },
    ttlMs: completion.ttlMs,
  };
}
