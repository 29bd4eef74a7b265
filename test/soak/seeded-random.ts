/**
 * A seeded pseudo-random generator (mulberry32) for the soak: every random
 * choice of a run comes from its seed, so that a run can be replayed with it.
 * Each actor (a client, the fault schedule, the gateway) draws from a stream
 * of its own ({@link SeededRandom.fork}): how many draws one makes, which
 * depends on timing (its retries), does not change what the others draw.
 */
export class SeededRandom {
  private state: number;

  constructor(readonly seed: number) {
    this.state = seed >>> 0;
  }

  /** A number in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  }

  /** An integer in [min, max], both included. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** One of `items`. */
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)];
  }

  /** A copy of `items` in a random order (Fisher–Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    const copy = [...items];
    for (let i = copy.length - 1; i > 0; i -= 1) {
      const j = this.int(0, i);
      [copy[i], copy[j]] = [copy[j], copy[i]];
    }
    return copy;
  }

  /** An independent stream for `label`, derived from this one's seed. */
  fork(label: string): SeededRandom {
    // FNV-1a over the seed and the label.
    let hash = 0x811c9dc5;
    for (const char of `${this.seed}:${label}`) {
      hash = Math.imul(hash ^ char.charCodeAt(0), 0x01000193) >>> 0;
    }
    return new SeededRandom(hash);
  }
}

/**
 * The seed of a randomized test: the environment variable `variable` when
 * set (an integer from 0 to 2³² − 1), else a random one.
 */
export function seedFrom(variable: string): number {
  const given = process.env[variable];
  if (given === undefined || given === '') {
    return Math.floor(Math.random() * 4_294_967_296);
  }
  const seed = Number(given);
  if (!Number.isInteger(seed) || seed < 0 || seed >= 4_294_967_296) {
    throw new Error(
      `${variable} must be an integer from 0 to 4294967295, not ${JSON.stringify(given)}`,
    );
  }
  return seed;
}

/** The soak's seed: `SOAK_SEED` when set, else a random one. */
export function soakSeed(): number {
  return seedFrom('SOAK_SEED');
}
