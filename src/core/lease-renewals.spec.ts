import { Logger } from '@nestjs/common';
import type { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';
import { LeaseRenewals } from './lease-renewals.js';

/** A release the test answers: how often it was tried, and its outcome. */
function release(outcomes: Array<'lands' | 'fails'>) {
  const state = { tries: 0 };
  return {
    state,
    call: () => {
      const outcome = outcomes[state.tries] ?? outcomes.at(-1);
      state.tries += 1;
      return outcome === 'lands'
        ? Promise.resolve()
        : Promise.reject(new Error('the store is out of reach'));
    },
  };
}

describe('LeaseRenewals at shutdown', () => {
  // Renewals never run here: no attempt is added, and none is started.
  const renewals = () =>
    new LeaseRenewals(
      {} as IdempotencyStore,
      15_000,
      new Logger('LeaseRenewals'),
    );
  const inALease = () => Date.now() + 15_000;

  it('tries the pending releases at once before the server closes, and keeps those that fail for their retry', async () => {
    const subject = renewals();
    const lands = release(['lands']);
    const failsOnce = release(['fails', 'lands']);
    subject.retryRelease(lands.call, inALease());
    subject.retryRelease(failsOnce.call, inALease());
    await subject.releasePending();
    expect([lands.state.tries, failsOnce.state.tries]).toEqual([1, 1]);
    // The one that landed is done with; the other is tried again.
    await subject.releasePending();
    expect([lands.state.tries, failsOnce.state.tries]).toEqual([1, 2]);
    await subject.stop();
    expect([lands.state.tries, failsOnce.state.tries]).toEqual([1, 2]);
  });

  it('tries the releases still pending a last time as it stops, drops those that fail, and never rejects', async () => {
    const subject = renewals();
    const fails = release(['fails']);
    const lands = release(['fails', 'lands']);
    subject.retryRelease(fails.call, inALease());
    subject.retryRelease(lands.call, inALease());
    await subject.releasePending();
    await expect(subject.stop()).resolves.toBeUndefined();
    expect([fails.state.tries, lands.state.tries]).toEqual([2, 2]);
    // Stopped: nothing is left to try.
    await subject.releasePending();
    await subject.stop();
    expect([fails.state.tries, lands.state.tries]).toEqual([2, 2]);
  });

  it('does not try a release whose lease ran out: the key is free anyway', async () => {
    const subject = renewals();
    const lapsed = release(['lands']);
    subject.retryRelease(lapsed.call, Date.now() - 1);
    await subject.releasePending();
    await subject.stop();
    expect(lapsed.state.tries).toBe(0);
  });
});
