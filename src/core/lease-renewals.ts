import type { Logger } from '@nestjs/common';
import type { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';
import type { Execution } from './execution.js';
import { RunningExecutions } from './running-executions.js';
import { messageOf } from './error-message.js';
import { STORE_CALL_MIN_MS, withinStoreTime } from './store-deadline.js';

/**
 * @internal The claims that the attempts of this instance hold, renewed
 * together in one statement every lease/3, never past each attempt's
 * deadline. An attempt whose claim a renewal found taken over is told so
 * (`Execution.leaseLost`).
 */
/** How often a failed release is tried again. */
const RELEASE_RETRY_MS = 500;

/** A release that failed, and until when it is worth trying again. */
interface PendingRelease {
  readonly release: () => Promise<void>;
  readonly untilMs: number;
}

export class LeaseRenewals {
  private readonly running = new RunningExecutions<Execution>();
  private timer: NodeJS.Timeout | undefined;
  private renewing = false;
  /** Releases that failed, retried until they land or their lease ran out. */
  private readonly releases = new Set<PendingRelease>();
  private releaseTimer: NodeJS.Timeout | undefined;
  private releasing = false;

  /**
   * @param store the store that renews them.
   * @param leaseMs how long a claim lasts unless renewed.
   * @param logger where a failed renewal is logged.
   */
  constructor(
    private readonly store: IdempotencyStore,
    private readonly leaseMs: number,
    private readonly logger: Logger,
  ) {}

  /** Renews every lease/3 (at least every 100 ms) until {@link stop}. */
  start(): void {
    this.timer ??= setInterval(
      () => void this.renew(),
      this.intervalMs,
    ).unref();
  }

  /**
   * Stops renewing, and tries the releases still pending (see
   * {@link retryRelease}) a last time, at once and together, each bounded
   * as a retry is: an instance that shuts down within a lease of a failed
   * release frees that key if the store answers by then, instead of
   * leaving it to its lease. Never rejects.
   */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    clearInterval(this.releaseTimer);
    this.releaseTimer = undefined;
    await this.releasePending();
    this.releases.clear();
  }

  /**
   * Tries the releases still pending once now, at once and together (each
   * turn of the retry, and at shutdown, when the next turn may not come);
   * those that fail stay pending. Never rejects.
   */
  async releasePending(): Promise<void> {
    await Promise.all(
      [...this.releases].map(async (pending) => {
        if (await this.tryRelease(pending)) {
          this.releases.delete(pending);
        }
      }),
    );
  }

  /**
   * Retries a release that failed (the store out of reach, its answer
   * lost) every {@link RELEASE_RETRY_MS} until it lands, or until
   * `untilMs` (epoch ms), when the claim's lease has run out and the key
   * is free anyway: the key is free as soon as the store answers again,
   * not a lease later. A release is fenced by its owner: one that lands
   * after a takeover changes nothing.
   */
  retryRelease(release: () => Promise<void>, untilMs: number): void {
    this.releases.add({ release, untilMs });
    this.releaseTimer ??= setInterval(
      () => void this.retryReleases(),
      RELEASE_RETRY_MS,
    ).unref();
  }

  add(execution: Execution): void {
    this.running.add(execution);
  }

  /** Whether `execution` holds its claim here (renewed, releasable). */
  has(execution: Execution): boolean {
    return this.running.has(execution);
  }

  delete(execution: Execution): void {
    this.running.delete(execution);
  }

  private get intervalMs(): number {
    return Math.max(100, Math.floor(this.leaseMs / 3));
  }

  private async retryReleases(): Promise<void> {
    if (this.releasing) {
      return;
    }
    this.releasing = true;
    try {
      // Those still out of reach stay for the next turn.
      await this.releasePending();
    } finally {
      this.releasing = false;
      if (this.releases.size === 0) {
        clearInterval(this.releaseTimer);
        this.releaseTimer = undefined;
      }
    }
  }

  /**
   * Tries a pending release once, unless its lease ran out (the key is
   * free anyway): whether it is done with. Bounded: one release that the
   * store's client holds must not hold up the others (nor every later
   * turn).
   */
  private async tryRelease(pending: PendingRelease): Promise<boolean> {
    if (pending.untilMs <= Date.now()) {
      return true;
    }
    try {
      await withinStoreTime(pending.release(), STORE_CALL_MIN_MS, 'release');
      return true;
    } catch {
      return false;
    }
  }

  /** Renews the leases of every attempt running here, in one statement. */
  private async renew(): Promise<void> {
    if (this.renewing || this.running.size === 0) {
      return;
    }
    this.renewing = true;
    const now = Date.now();
    const executions = this.running.toArray();
    try {
      // Bounded: a renewal that the store's client holds would stop every
      // later one, even once the store is back.
      const held = await withinStoreTime(
        this.store.renew(
          executions.map(({ lease, deadline }) => ({
            scope: lease!.scope,
            key: lease!.key,
            owner: lease!.owner,
            // Never past the attempt's deadline.
            durationMs: Math.max(0, Math.min(this.leaseMs, deadline - now)),
          })),
        ),
        Math.max(STORE_CALL_MIN_MS, this.intervalMs),
        'renewal',
      );
      for (const execution of executions) {
        if (this.running.has(execution) && !held.has(execution.lease!.owner)) {
          execution.leaseLost();
        }
      }
    } catch (error) {
      this.logger.warn(
        `Renewing ${executions.length} lease(s) failed, retrying in ${this.intervalMs} ms: ${messageOf(error)}`,
      );
    } finally {
      this.renewing = false;
    }
  }
}
