import {
  STORE_CALL_MIN_MS,
  StoreTimeoutError,
  storeCallMs,
  withinStoreTime,
} from './store-deadline.js';

describe('withinStoreTime', () => {
  it("gives the call's answer, or its error, when it comes in time", async () => {
    await expect(
      withinStoreTime(Promise.resolve(7), 1_000, 'claim'),
    ).resolves.toBe(7);
    const refused = new Error('refused');
    await expect(
      withinStoreTime(Promise.reject(refused), 1_000, 'claim'),
    ).rejects.toBe(refused);
  });

  it('fails a call that never answers once its time is up, and ignores its late answer', async () => {
    let answer!: (value: string) => void;
    const call = new Promise<string>((resolve) => {
      answer = resolve;
    });
    const sent = Date.now();
    const outcome = withinStoreTime(call, 150, 'completion');
    await expect(outcome).rejects.toBeInstanceOf(StoreTimeoutError);
    expect(Date.now() - sent).toBeGreaterThanOrEqual(149);
    await expect(outcome).rejects.toThrow(
      'The idempotency store did not answer the completion within 150 ms',
    );
    answer('late');
    await expect(outcome).rejects.toBeInstanceOf(StoreTimeoutError);
  });
});

describe('storeCallMs', () => {
  it("is the time left until the deadline, and at least a round trip's", () => {
    expect(storeCallMs(Date.now() + 60_000)).toBeGreaterThan(59_000);
    expect(storeCallMs(Date.now() + 10)).toBe(STORE_CALL_MIN_MS);
    expect(storeCallMs(Date.now() - 5_000)).toBe(STORE_CALL_MIN_MS);
  });
});
