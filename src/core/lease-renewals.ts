import type { Logger } from '@nestjs/common';
import type { IdempotencyStore } from '../interfaces/idempotency-store.interface.js';
import type { Execution } from './execution.js';
import { RunningExecutions } from './running-executions.js';
import { messageOf } from './error-message.js';

/**
 * @internal The claims that the attempts of this instance hold, renewed
 * together in one statement every lease/3, never past each attempt's
 * deadline. An attempt whose claim a renewal found taken over is told so
 * (`Execution.leaseLost`).
 */
export class LeaseRenewals {
  private readonly running = new RunningExecutions<Execution>();
  private timer: NodeJS.Timeout | undefined;
  private renewing = false;

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

  /** Renews the leases of every attempt running here, in one statement. */
  private async renew(): Promise<void> {
    if (this.renewing || this.running.size === 0) {
      return;
    }
    this.renewing = true;
    const now = Date.now();
    const executions = this.running.toArray();
    try {
      const held = await this.store.renew(
        executions.map(({ lease, deadline }) => ({
          scope: lease!.scope,
          key: lease!.key,
          owner: lease!.owner,
          // Never past the attempt's deadline.
          durationMs: Math.max(0, Math.min(this.leaseMs, deadline - now)),
        })),
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
