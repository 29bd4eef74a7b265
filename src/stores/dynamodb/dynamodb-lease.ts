import type {
  ClaimRequest,
  Lease,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';

/**
 * @internal The DynamoDB store's handle of a claim it granted
 * (`ClaimOutcome.lease`), which the module hands back to every later call
 * for that claim. It remembers whether the claim's key is bound to its
 * request (attribute `bound`): as the claim found it, or since this claim's
 * `bind()`. A release of a key known bound then keeps the item in one
 * write, instead of a deletion that its condition refuses and a second
 * write; a release told to bind a key known bound need not write `bound`.
 *
 * The handle only spares requests: every write stays fenced, and a release
 * of a key not known bound (a bare lease, a handle of an attempt whose
 * `bind()` lost its reply) is decided by the conditions of its writes.
 */
export class DynamoDbLease implements StepLease {
  readonly scope: string;
  readonly key: string;
  readonly owner: string;
  readonly fingerprint: string;
  /** Whether the key is known bound to the claim's request. */
  #bound: boolean;

  /**
   * @param request the claim request it was granted for.
   * @param bound whether the item the claim wrote was bound already.
   */
  constructor(request: ClaimRequest, bound: boolean) {
    this.scope = request.scope;
    this.key = request.key;
    this.owner = request.owner;
    this.fingerprint = request.fingerprint;
    this.#bound = bound;
  }

  /** Whether `lease` is a handle whose key is known bound to its request. */
  static isBound(lease: Lease): boolean {
    return lease instanceof DynamoDbLease && lease.#bound;
  }

  /** Records that the key of `lease`, if a handle, is bound now. */
  static bound(lease: Lease): void {
    if (lease instanceof DynamoDbLease) {
      lease.#bound = true;
    }
  }
}
