import { Waiters } from './waiters.js';

describe('Waiters', () => {
  it('wakes every waiter of a key, and only of that key', async () => {
    const waiters = new Waiters();
    const woken: string[] = [];
    const a1 = waiters.wait('s', 'a', 60_000).then(() => woken.push('a1'));
    const a2 = waiters.wait('s', 'a', 60_000).then(() => woken.push('a2'));
    const b = waiters.wait('s', 'b', 60_000).then(() => woken.push('b'));
    const other = waiters
      .wait('t', 'a', 60_000)
      .then(() => woken.push('other scope'));
    waiters.wake('s', 'a');
    await Promise.all([a1, a2]);
    expect(woken.sort()).toEqual(['a1', 'a2']);
    waiters.wake('s', 'b');
    waiters.wake('t', 'a');
    await Promise.all([b, other]);
    expect(woken.sort()).toEqual(['a1', 'a2', 'b', 'other scope']);
  });

  it('resolves after its timeout when nobody wakes it', async () => {
    const waiters = new Waiters();
    await expect(waiters.wait('s', 'k', 1)).resolves.toBeUndefined();
    // A later wake finds nobody, and a new waiter waits afresh.
    waiters.wake('s', 'k');
    let woken = false;
    const next = waiters.wait('s', 'k', 60_000).then(() => (woken = true));
    expect(woken).toBe(false);
    waiters.wake('s', 'k');
    await next;
    expect(woken).toBe(true);
  });

  it('tells a scope and key apart from another split of the same text', async () => {
    const waiters = new Waiters();
    let woken = false;
    const waiting = waiters.wait('a', 'b:c', 50).then(() => (woken = true));
    waiters.wake('a:b', 'c');
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(woken).toBe(false);
    await waiting;
  });
});
