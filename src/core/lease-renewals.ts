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

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    clearInterval(this.releaseTimer);
    this.releaseTimer = undefined;
    this.releases.clear();
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
      for (const pending of [...this.releases]) {
        if (pending.untilMs <= Date.now()) {
          this.releases.delete(pending);
          continue;
        }
        try {
          // Bounded: one release that the store's client holds must not
          // hold up the others (nor every later turn).
          await withinStoreTime(
            pending.release(),
            STORE_CALL_MIN_MS,
            'release',
          );
          this.releases.delete(pending);
        } catch {
          // Still out of reach: the next turn tries again.
        }
      }
    } finally {
      this.releasing = false;
      if (this.releases.size === 0) {
        clearInterval(this.releaseTimer);
        this.releaseTimer = undefined;
      }
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
