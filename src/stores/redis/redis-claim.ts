import type {
  ClaimOutcome,
  ClaimRequest,
  Lease,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';
import { runScriptBuffer, type RedisClient } from './redis-client.js';
import { RedisKeys } from './redis-keys.js';
import { decodeRecord, fingerprintLine, requestLines } from './redis-record.js';
import { CLAIM } from './redis.scripts.js';

/** @internal The lines of a claim that its finished record repeats. */
export interface ClaimLines {
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
}

/**
 * @internal The Redis store's handle of a claim that it granted
 * (`ClaimOutcome.lease`), which the module hands back to every later call
 * for that claim: it keeps the record's id and the request's lines that
 * the claim computed, so that its completion does not compute them again.
 *
 * A claim granted by the plain `SET NX` on a key without steps may
 * complete by one `SET … IFEQ <the value its claim wrote>` instead of the
 * completion script, as long as the key has no steps and its record is
 * kept at least as long as the claim kept the key's generation (the
 * command leaves the generation, which must not outlive the record): so
 * its handle keeps that value, and how long the claim kept the
 * generation, until the claim saves a step, is bound, completes or is
 * released.
 *
 * Any other lease (a caller built its own, or the handle of a claim that
 * the script granted) carries no such value, and completes by the script.
 */
export class RedisClaim implements StepLease, ClaimLines {
  readonly scope: string;
  readonly key: string;
  readonly owner: string;
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
  /** The record's id (see `RedisKeys.id`). */
  readonly id: string;
  /** The request's lines of its record (see `requestLines`). */
  readonly lines: string;
  /** What the claim wrote, while its completion may compare and set it. */
  #written: string | undefined;
  /** How long (ms) the claim kept the key's generation. */
  readonly #generationMs: number;

  /**
   * @param request the claim request it was granted for.
   * @param id the record's id.
   * @param lines the request's lines of its record.
   * @param written the value that the claim's `SET NX` wrote, if its
   *   completion may compare and set it.
   * @param generationMs how long (ms) the claim kept the key's generation.
   */
  constructor(
    request: ClaimRequest,
    id: string,
    lines: string,
    written?: string,
    generationMs = 0,
  ) {
    this.scope = request.scope;
    this.key = request.key;
    this.owner = request.owner;
    this.fingerprint = request.fingerprint;
    this.method = request.method;
    this.path = request.path;
    this.id = id;
    this.lines = lines;
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

/** @internal The record's id of a lease: its handle's, or computed. */
export function recordIdOf(lease: Lease): string {
  return lease instanceof RedisClaim
    ? lease.id
    : RedisKeys.id(lease.scope, lease.key);
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
 * @internal The request's lines (see `requestLines`) of a lease that
 * carries them or its claim's fingerprint, method and path, from which a
 * completion builds the finished record whole; undefined for a bare lease.
 */
export function requestLinesOf(lease: Lease): string | undefined {
  if (lease instanceof RedisClaim) {
    return lease.lines;
  }
  const lines = claimLinesOf(lease);
  return (
    lines && requestLines({ ...lines, scope: lease.scope, key: lease.key })
  );
}

/**
 * The claim script's reply: {1, the key's generation}, or {0, the record,
 * lease ms left}.
 */
type ClaimReply = [1, Buffer] | [0, Buffer, number?];

/**
 * @internal Claims a key by the claim script (see CLAIM), where the plain
 * `SET NX` did not decide: `claim.value` is the claim's in-progress value,
 * `claim.lease` the store's handle of the claim, if granted.
 */
export async function claimByScript(
  client: RedisClient,
  keys: RedisKeys,
  request: ClaimRequest,
  claim: {
    readonly value: string;
    readonly leaseMs: number;
    readonly generationMs: number;
    readonly lease: RedisClaim;
  },
): Promise<ClaimOutcome> {
  const { lease } = claim;
  const { id } = lease;
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
    return { state: 'claimed', lease, generation: reply[1].toString() };
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
