import type {
  ClaimOutcome,
  ClaimRequest,
  Lease,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';
import { runScriptBuffer, type RedisClient } from './redis-client.js';
import { RedisKeys } from './redis-keys.js';
import { decodeRecord, fingerprintLine } from './redis-record.js';
import { CLAIM } from './redis.scripts.js';

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

/**
 * The claim script's reply: {1, the key's generation}, or {0, the record,
 * lease ms left}.
 */
type ClaimReply = [1, Buffer] | [0, Buffer, number?];

/**
 * @internal Claims a key by the claim script (see CLAIM), where the plain
 * `SET NX` did not decide: `claim.value` is the claim's in-progress value,
 * `claim.lease` the store's handle when that `SET NX` wrote the claim.
 */
export async function claimByScript(
  client: RedisClient,
  keys: RedisKeys,
  request: ClaimRequest,
  claim: {
    readonly value: string;
    readonly leaseMs: number;
    readonly generationMs: number;
    readonly lease: RedisClaim | undefined;
  },
): Promise<ClaimOutcome> {
  const id = RedisKeys.id(request.scope, request.key);
  const { lease } = claim;
  const reply = await runScriptBuffer<ClaimReply>(
    client,
    CLAIM,
    [keys.record(id), keys.generation(id)],
    [
      request.owner,
      claim.value,
      claim.leaseMs,
      request.wait ? '1' : '0',
      fingerprintLine(request.fingerprint),
      Date.now(),
      claim.generationMs,
    ],
  );
  if (reply[0] === 1) {
    const generation = reply[1].toString();
    return lease
      ? { state: 'claimed', lease, generation }
      : { state: 'claimed', generation };
  }
  const found = decodeRecord(reply[1]);
  return found.state === 'in_progress'
    ? {
        state: 'in_progress',
        fingerprint: found.fingerprint,
        leaseMs: Math.max(0, Number(reply[2] ?? 0)),
      }
    : { state: 'finished', record: found.record };
}
