/**
 * @internal Duplicates waiting for a key to finish (wait mode), woken by the
 * local owner's completion or by another instance's notification.
 */
export class Waiters {
  private readonly waiting = new Map<string, Set<() => void>>();

  /** Resolves when the key is woken, or after `timeoutMs`. */
  wait(scope: string, key: string, timeoutMs: number): Promise<void> {
    const id = `${scope}\u001f${key}`;
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        const set = this.waiting.get(id);
        set?.delete(wake);
        if (set?.size === 0) {
          this.waiting.delete(id);
        }
        resolve();
      };
      const timer = setTimeout(wake, Math.max(0, timeoutMs)).unref();
      let set = this.waiting.get(id);
      if (!set) {
        set = new Set();
        this.waiting.set(id, set);
      }
      set.add(wake);
    });
  }

  /** Wakes every waiter of every key (a notification may have been missed). */
  wakeAll(): void {
    for (const set of [...this.waiting.values()]) {
      for (const wake of [...set]) {
        wake();
      }
    }
  }

  /** Wakes every waiter of a key. */
  wake(scope: string, key: string): void {
    if (this.waiting.size === 0) {
      return;
    }
    const set = this.waiting.get(`${scope}\u001f${key}`);
    if (set) {
      for (const wake of [...set]) {
        wake();
      }
    }
  }
}
