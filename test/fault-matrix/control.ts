import { Injectable } from '@nestjs/common';
import { Barrier } from '../utils/barrier.js';

/**
 * What the test makes the next run of a reference do: wait at a barrier
 * once it has charged (holding no connection), or fail once after its
 * first write (on the other stores: after its charge) with an error of its
 * own. Shared by the matrix's PostgreSQL and other stores' applications.
 */
@Injectable()
export class Control {
  private readonly holds = new Map<string, Barrier>();
  private readonly failures = new Set<string>();
  /** Runs of the handler, by reference. */
  readonly runs = new Map<string, number>();
  /** The keys the runs of a reference derived for their charge. */
  private readonly derived = new Map<string, Set<string>>();

  /** @internal A run of `reference` derived `key` for its charge. */
  derivedKey(reference: string, key: string): void {
    this.derived.set(
      reference,
      (this.derived.get(reference) ?? new Set()).add(key),
    );
  }

  /**
   * The key that the runs of `reference` sent the gateway (`undefined`
   * before any charged).
   * @throws when two runs of the one request derived different keys: a
   * retry whose step had not committed would charge again.
   */
  chargeKey(reference: string): string | undefined {
    const keys = [...(this.derived.get(reference) ?? [])];
    if (keys.length > 1) {
      throw new Error(
        `The runs of ${reference} derived ${keys.length} keys for one charge: ${keys.join(', ')}`,
      );
    }
    return keys[0];
  }

  /** Holds the next run of `reference` after its charge, at the barrier returned. */
  holdAfterCharge(reference: string): Barrier {
    const barrier = new Barrier();
    this.holds.set(reference, barrier);
    return barrier;
  }

  /** Makes the next run of `reference` fail after its first write. */
  failOnce(reference: string): void {
    this.failures.add(reference);
  }

  /** @internal The barrier of this run of `reference`, if held (once). */
  takeHold(reference: string): Barrier | undefined {
    const barrier = this.holds.get(reference);
    this.holds.delete(reference);
    return barrier;
  }

  /** @internal Whether this run of `reference` fails (once). */
  takeFailure(reference: string): boolean {
    return this.failures.delete(reference);
  }
}
