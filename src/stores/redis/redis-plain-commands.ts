import type {
  ClaimOutcome,
  ClaimRequest,
  Lease,
} from '../../interfaces/idempotency-store.interface.js';
import { RedisClaim } from './redis-claim.js';
import type { RedisKeys } from './redis-keys.js';
import { decodeRecord } from './redis-record.js';
import { batchWrites, type RedisClient } from './redis-client.js';

/** `SET` with options that ioredis's types do not list (`IFEQ`). */
interface PlainSet {
  set(...args: Array<string | Buffer | number>): Promise<string | null>;
}

/** Whether `error` is the server refusing `SET … IFEQ` (Redis before 8.4, Valkey before 8.1). */
function refusesIfEq(error: unknown): boolean {
  return error instanceof Error && /^ERR syntax error/i.test(error.message);
}

/**
 * @internal What the plain path made of a claim: its outcome, or `script`
 * for what the claim script decides (with the store's handle, when the
 * `SET NX` wrote the claim but found the key's generation: the script
 * reads it).
 */
export type PlainClaim =
  ClaimOutcome | { readonly state: 'script'; readonly lease?: RedisClaim };

const SCRIPT: PlainClaim = { state: 'script' };

/**
 * @internal The Redis store's path without scripts, for keys without
 * steps: a free key is claimed by a plain `SET NX PX GET`, which returns
 * the record holding it otherwise, and a claim so granted on a key without
 * steps completes by `SET … IFEQ` of the value its claim wrote, where the
 * server has it (Valkey 8.1, Redis 8.4). What it cannot decide (a claim
 * held by another attempt or bound by a step, a record past its own
 * expiry, a key whose generation outlived its last claim, a claim's value
 * that changed) is left to the scripts.
 */
export class RedisPlainCommands {
  /**
   * Whether the server has `SET … IFEQ`: unknown until a completion tries
   * it, false once one was refused.
   */
  private ifEq: boolean | undefined;

  constructor(
    private readonly client: RedisClient,
    private readonly keys: RedisKeys,
  ) {}

  /**
   * Claims the record `id` for `request` by one `SET NX PX GET` of `value`
   * (its in-progress value, of the request's `lines`) for `leaseMs` (at
   * least 1), after a `SET NX` of the key's generation (the owner token)
   * for `generationMs`, in the same write: claimed in a generation of its
   * own, with the store's handle ({@link RedisClaim}), which may complete
   * by compare-and-set when the key has no steps; the finished record that
   * holds it; or `script`, for the claim script (see CLAIM).
   */
  async claim(
    request: ClaimRequest,
    id: string,
    lines: string,
    value: string,
    leaseMs: number,
    generationMs: number,
  ): Promise<PlainClaim> {
    batchWrites(this.client);
    const started = this.client.set(
      this.keys.generation(id),
      request.owner,
      'PX',
      generationMs,
      'NX',
    );
    const claimed = this.client.setBuffer(
      this.keys.record(id),
      value,
      'PX',
      leaseMs,
      'NX',
      'GET',
    );
    // In the same write: whether the key has steps (of an attempt whose
    // lease ran out). None can be saved now but by this attempt, whose
    // claim fences every other owner's. Sent with every claim (a replay
    // too) rather than once a claim is granted: in a write of its own, it
    // would cost Redis and the application a read and a write more.
    // Not sent where the server has no SET IFEQ: a compare-and-set by a
    // script there would save Redis little more than the EXISTS costs the
    // application, so every completion there is the completion script
    // (figures in test/bench/README.md).
    const steps =
      this.ifEq === false
        ? undefined
        : this.client.exists(this.keys.steps(id)).catch(() => undefined);
    // One after the other, which costs less than Promise.all; the second
    // one's failure is handled when the first one fails.
    const generation = await started.catch((error: unknown) => {
      void claimed.catch(() => undefined);
      throw error;
    });
    const held = await claimed;
    if (held === null) {
      const lease = new RedisClaim(
        request,
        id,
        lines,
        steps && (await steps) === 0 ? value : undefined,
        generationMs,
      );
      return generation === 'OK'
        ? { state: 'claimed', lease, generation: request.owner }
        : { state: 'script', lease };
    }
    const found = decodeRecord(held);
    if (found.state === 'finished' && found.expiresAt > Date.now()) {
      return { state: 'finished', record: found.record };
    }
    // Its claim sent again (see CLAIM), a claim held by another attempt or
    // bound by a step (its lease is in its value), a record past its own
    // expiry: the script decides.
    return SCRIPT;
  }

  /**
   * Completes `lease`'s claim by `SET <record> <finished> PX ttlMs IFEQ
   * <the value its claim wrote>`, if `lease` is a handle that may still
   * (see {@link RedisClaim.take}), `finished` is the record whole and the
   * server has the option: whether it wrote. False leaves the completion
   * to the script: a value that changed (a duplicate waits, the lease was
   * taken over), a server without `SET … IFEQ`, any other lease, and a
   * record kept for less time than the claim kept the key's generation
   * (this command leaves the generation as it is, and it must not outlive
   * the record: see COMPLETE).
   * @throws what the command threw, unless the server refused the option.
   */
  async complete(
    lease: Lease,
    id: string,
    finished: string | Buffer | undefined,
    ttlMs: number,
  ): Promise<boolean> {
    const claimed = RedisClaim.take(lease);
    if (
      finished === undefined ||
      claimed === undefined ||
      ttlMs <= 0 ||
      claimed.generationMs > ttlMs ||
      this.ifEq === false
    ) {
      return false;
    }
    batchWrites(this.client);
    try {
      const reply = await (this.client as unknown as PlainSet).set(
        this.keys.record(id),
        finished,
        'PX',
        ttlMs,
        'IFEQ',
        claimed.written,
      );
      this.ifEq = true;
      return reply === 'OK';
    } catch (error) {
      if (!refusesIfEq(error)) {
        throw error;
      }
      this.ifEq = false;
      return false;
    }
  }
}
