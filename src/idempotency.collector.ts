import {
  Inject,
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { CronJob } from 'cron';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from './idempotency.options.js';
import { IdempotencyExecutor } from './core/idempotency.executor.js';
import { IdempotencyEvents } from './idempotency.events.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import { messageOf } from './core/error-message.js';
import { reportedStep } from './core/stored-step.js';

/** Name of the module's job in the `SchedulerRegistry`. */
const JOB_NAME = 'idempotency-gc';

/**
 * Deletes expired idempotency records: on the schedule of the `gc` option,
 * and on demand with `collect()`. Before it deletes the recovery points of a
 * request that never completed (its steps ran, a charge perhaps, but its
 * own writes never committed), it emits an `abandoned` event with them,
 * logged as a warning.
 *
 * Each batch is one short statement that deletes at most `batchSize` expired
 * rows, found through the `expires_at` index, skipping rows that another
 * instance is deleting (`FOR UPDATE SKIP LOCKED`): instances never delete the
 * same rows nor wait on each other, and request traffic never waits on a
 * collection for longer than one batch.
 *
 * @example
 * // a collection run from a job of your own, with `gc: false`
 * const removed = await app.get(IdempotencyCollector).collect();
 */
@Injectable()
export class IdempotencyCollector
  implements OnApplicationBootstrap, BeforeApplicationShutdown
{
  private readonly logger = new Logger('Idempotency');
  private running: Promise<number> | undefined;
  private stopped = false;
  private scheduled = false;

  constructor(
    /** Its store as the module reads it (opened, under `encryption`). */
    private readonly executor: IdempotencyExecutor,
    private readonly scheduler: SchedulerRegistry,
    private readonly events: IdempotencyEvents,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  onApplicationBootstrap(): void {
    const { gc } = this.options;
    // A hybrid application calls the hooks again for each microservice.
    if (!gc || this.scheduled || this.stopped) {
      return;
    }
    this.scheduled = true;
    const tick = () => void this.runScheduled();
    if (gc.cron) {
      const job = CronJob.from({
        cronTime: gc.cron,
        onTick: tick,
        start: true,
      });
      this.scheduler.addCronJob(JOB_NAME, job);
    } else {
      const timer = setInterval(tick, gc.intervalMs);
      timer.unref();
      this.scheduler.addInterval(JOB_NAME, timer);
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (this.stopped) {
      return;
    }
    this.stopped = true;
    // @nestjs/schedule clears its registry in its own shutdown hook, which
    // Nest may call first: the job is then gone already.
    const type = this.options.gc?.cron ? 'cron' : 'interval';
    if (this.scheduled && this.scheduler.doesExist(type, JOB_NAME)) {
      if (type === 'cron') {
        this.scheduler.deleteCronJob(JOB_NAME);
      } else {
        this.scheduler.deleteInterval(JOB_NAME);
      }
    }
    await this.running?.catch(() => undefined);
  }

  /**
   * Runs one collection now: deletes expired records (and expired steps of
   * requests that never finished, and expired counts of failed attempts)
   * in batches until none is left or the time budget (`gc.maxDuration`) is
   * spent.
   *
   * @param batchSize rows per statement, a whole number from 1; defaults
   * to `gc.batchSize` (1000).
   * @returns how many rows it deleted: records, steps and counts of failed
   * attempts together (not a count of records alone).
   * @throws IdempotencyConfigurationError for another `batchSize`.
   */
  async collect(
    batchSize = this.options.gc?.batchSize ?? 1000,
  ): Promise<number> {
    if (!Number.isInteger(batchSize) || batchSize < 1) {
      throw new IdempotencyConfigurationError(
        `IdempotencyCollector.collect() takes a batch size of at least 1 row, not ${String(batchSize)}.`,
      );
    }
    const started = Date.now();
    const budget = this.options.gc?.maxDurationMs ?? 10_000;
    let removed = 0;
    for (;;) {
      const batch = await this.executor.store.collect(batchSize, (key) =>
        // Steps completed for a request that never completed: a side effect
        // (a charge) without the request's own writes. Reported before they
        // are deleted.
        this.events.emit({
          type: 'abandoned',
          scope: key.scope,
          key: key.key,
          steps: key.steps.map(reportedStep),
        }),
      );
      removed += batch.removed;
      if (!batch.more || this.stopped || Date.now() - started >= budget) {
        break;
      }
    }
    this.events.emit({ type: 'gc', removed, durationMs: Date.now() - started });
    return removed;
  }

  /** A scheduled run: never overlaps another, never throws. */
  private async runScheduled(): Promise<void> {
    if (this.running || this.stopped) {
      return;
    }
    this.running = this.collect();
    try {
      await this.running;
    } catch (error) {
      this.logger.warn(
        `GC failed, retrying at the next run: ${messageOf(error)}`,
      );
    } finally {
      this.running = undefined;
    }
  }
}
