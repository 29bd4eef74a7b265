import type { INestApplication } from '@nestjs/common';
import {
  IdempotencyStore,
  type ClaimOutcome,
  type ClaimRequest,
} from '../../src/index.js';
import { until } from './barrier.js';

/** What the claims of an application answered, as they answer. */
export interface ClaimWatch {
  /**
   * Resolves once `count` distinct attempts (a request, a message, a run)
   * claiming `key` were answered `state`: for `'in_progress'`, that many
   * duplicates found the key held (and, in wait mode, wait for it now).
   */
  reached(
    key: string,
    state: ClaimOutcome['state'],
    count: number,
  ): Promise<void>;
  /** The distinct attempts at `key` answered `state` so far. */
  count(key: string, state: ClaimOutcome['state']): number;
  /** Stops watching. */
  restore(): void;
}

/**
 * Watches the claims the application's module makes (its store's `claim`):
 * a test waits until its duplicates have found a key held, instead of
 * sleeping, whatever they do then (wait, or get 409 or 422).
 */
export function watchClaims(app: INestApplication): ClaimWatch {
  const store = app.get<IdempotencyStore>(IdempotencyStore);
  const original = store.claim;
  const seen = new Map<string, Set<string>>();
  store.claim = async (request: ClaimRequest) => {
    const outcome = await original.call(store, request);
    const id = `${request.key}\u001f${outcome.state}`;
    seen.set(id, (seen.get(id) ?? new Set()).add(request.owner));
    return outcome;
  };
  const count = (key: string, state: ClaimOutcome['state']) =>
    seen.get(`${key}\u001f${state}`)?.size ?? 0;
  return {
    count,
    reached: (key, state, wanted) =>
      until(
        () => Promise.resolve(count(key, state) >= wanted),
        `${wanted} claim(s) of key ${key} answered ${state}`,
      ),
    restore: () => {
      store.claim = original;
    },
  };
}
