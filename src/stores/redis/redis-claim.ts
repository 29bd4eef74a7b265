import type {
  ClaimRequest,
  Lease,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';

/** @internal The lines of a claim that its finished record repeats. */
export interface ClaimLines {
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
}

/**
 * @internal The Redis store's handle of a claim that it granted by the
 * plain `SET NX` on a key without steps (`ClaimOutcome.lease`), which the
 * module hands back to every later call for that claim. Such a claim may
 * complete by one `SET … IFEQ <the value its claim wrote>` instead of the
 * completion script, as long as the key has no steps and its record is
 * kept at least as long as the claim kept the key's generation (the
 * command leaves the generation, which must not outlive the record): so
 * the handle keeps that value, and how long the claim kept the
 * generation, until the claim saves a step, is bound, completes or is
 * released.
 *
 * Any other lease (the store returned no handle, or a caller built its
 * own) carries no such value, and completes by the script.
 */
export class RedisClaim implements StepLease, ClaimLines {
  readonly scope: string;
  readonly key: string;
  readonly owner: string;
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
  /** What the claim wrote, while its completion may compare and set it. */
  #written: string | undefined;
  /** How long (ms) the claim kept the key's generation. */
  readonly #generationMs: number;

  /**
   * @param request the claim request it was granted for.
   * @param written the value that the claim's `SET NX` wrote.
   * @param generationMs how long (ms) the claim kept the key's generation.
   */
  constructor(request: ClaimRequest, written: string, generationMs: number) {
    this.scope = request.scope;
    this.key = request.key;
    this.owner = request.owner;
    this.fingerprint = request.fingerprint;
    this.method = request.method;
    this.path = request.path;
    this.#written = written;
    this.#generationMs = generationMs;
  }

  /**
   * The value that `lease`'s claim wrote, and how long it kept the key's
   * generation, if `lease` is a handle that may still complete by
   * compare-and-set; the handle forgets them (a step, a completion or a
   * release ends that, whatever its outcome).
   */
  static take(
    lease: Lease,
  ): { readonly written: string; readonly generationMs: number } | undefined {
    if (!(lease instanceof RedisClaim) || lease.#written === undefined) {
      return undefined;
    }
    const written = lease.#written;
    lease.#written = undefined;
    return { written, generationMs: lease.#generationMs };
  }
}

/**
 * @internal The fingerprint, method and path of a lease that carries them
 * (the module's leases: a claim request, or a {@link RedisClaim}), from
 * which a completion builds the finished record whole; undefined for a
 * bare lease, whose record the completion script builds from the claim's.
 */
export function claimLinesOf(lease: Lease): ClaimLines | undefined {
  const lines = lease as Partial<ClaimLines>;
  return lines.fingerprint !== undefined &&
    lines.method !== undefined &&
    lines.path !== undefined
    ? (lines as ClaimLines)
    : undefined;
}
