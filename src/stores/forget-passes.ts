import type { ForgottenBatch } from '../interfaces/idempotency-store.interface.js';

/** What a deletion of one found item did. */
export interface ForgottenItem<T> {
  readonly records: number;
  readonly steps: number;
  /** What is left of the item for the next batch (its rows beyond its share). */
  readonly left?: T;
}

/**
 * @internal How a store without a scope index finds and deletes a scope's
 * items: a scan in chunks from an opaque position, and deletions.
 */
export interface ForgetSource<T, P> {
  /**
   * The next chunk of the scan from `position` (undefined: the start): the
   * scope's items in it, and where the scan goes on (undefined: it is over).
   */
  scan(
    scope: string,
    position: P | undefined,
  ): Promise<{ readonly found: readonly T[]; readonly next: P | undefined }>;
  /** The rows an item holds, as far as the scan saw (at least 1). */
  rows(item: T): number;
  /**
   * Deletes items, each at most `share` rows (an item deleted whole when
   * the source cannot delete part of one: `share` is then its rows).
   */
  remove(
    taken: ReadonlyArray<{ readonly item: T; readonly share: number }>,
  ): Promise<ReadonlyArray<ForgottenItem<T>>>;
  /** Whether an item can be deleted in part (its rows over batches). */
  readonly divisible: boolean;
}

interface Pass<T, P> {
  position: P | undefined;
  scanned: boolean;
  pending: T[];
  /** Rows deleted in this pass. */
  deleted: number;
  /** Which pass of the forget this is, from 1. */
  number: number;
}

/**
 * How many passes a forget makes at most: one that deleted anything is
 * followed by another, up to this many. A scope that keeps getting
 * requests has new keys in every pass; its forget must end all the same
 * (the caller is told to run it again then, as on PostgreSQL).
 */
const MAX_FORGET_PASSES = 3;

/**
 * @internal The batches of the forgets of scopes under way on one store,
 * each a pass over the keyspace from where its previous batch ended. A
 * pass that deleted anything is followed by another from the start (up to
 * {@link MAX_FORGET_PASSES}), so that a key written while the forget ran,
 * or left by a forget that stopped half way, is found too; the last batch
 * says no more once a whole pass found nothing of the scope, or after the
 * last pass.
 */
export class ForgetPasses<T, P> {
  private readonly passes = new Map<string, Pass<T, P>>();

  constructor(private readonly source: ForgetSource<T, P>) {}

  /** One batch of at most `batchSize` rows of the forget of `scope`. */
  async batch(scope: string, batchSize: number): Promise<ForgottenBatch> {
    const pass = this.passes.get(scope) ?? fresh<T, P>();
    this.passes.set(scope, pass);
    let records = 0;
    let steps = 0;
    try {
      while (records + steps < batchSize) {
        if (pass.pending.length === 0) {
          if (!pass.scanned) {
            const { found, next } = await this.source.scan(
              scope,
              pass.position,
            );
            pass.pending.push(...found);
            pass.position = next;
            pass.scanned = next === undefined;
            continue;
          }
          if (pass.deleted === 0 || pass.number >= MAX_FORGET_PASSES) {
            this.passes.delete(scope);
            return { records, steps, more: false };
          }
          Object.assign(pass, fresh<T, P>(pass.number + 1));
          continue;
        }
        const taken = this.take(
          pass,
          batchSize - records - steps,
          records + steps === 0,
        );
        if (taken.length === 0) {
          break;
        }
        for (const done of await this.source.remove(taken)) {
          records += done.records;
          steps += done.steps;
          // An item found again, or gone meanwhile, counts for the pass.
          pass.deleted += Math.max(1, done.records + done.steps);
          if (done.left !== undefined) {
            pass.pending.unshift(done.left);
          }
        }
      }
    } catch (error) {
      this.passes.delete(scope);
      throw error;
    }
    return { records, steps, more: true };
  }

  /**
   * The pending items that fit in `budget` rows, each with its share; an
   * indivisible item larger than the budget only as the batch's first.
   */
  private take(
    pass: Pass<T, P>,
    budget: number,
    first: boolean,
  ): Array<{ item: T; share: number }> {
    const taken: Array<{ item: T; share: number }> = [];
    while (pass.pending.length > 0 && budget > 0) {
      const rows = this.source.rows(pass.pending[0]);
      if (
        rows > budget &&
        !this.source.divisible &&
        (taken.length > 0 || !first)
      ) {
        break;
      }
      const share = this.source.divisible ? Math.min(rows, budget) : rows;
      taken.push({ item: pass.pending.shift()!, share });
      budget -= share;
    }
    return taken;
  }
}

function fresh<T, P>(number = 1): Pass<T, P> {
  return {
    position: undefined,
    scanned: false,
    pending: [],
    deleted: 0,
    number,
  };
}
