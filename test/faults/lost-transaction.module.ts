import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { QueryRunner, Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/**
 * Where the test holds a run: before its first statement, or between its two
 * writes, idle in its transaction (at a barrier) or inside a statement
 * (waiting for an advisory lock that the test holds, {@link lockOf}); and
 * what the statements of each held run did after it was let go.
 */
@Injectable()
export class Pause {
  /** Runs of these references wait here, once, after their first write. */
  private readonly barriers = new Map<string, Barrier>();
  /** Runs of these references wait here, once, before their first statement. */
  private readonly before = new Map<string, Barrier>();
  /** Runs of these references wait for their advisory lock, once, after their first write. */
  private readonly blocked = new Set<string>();
  /** Runs per reference. */
  private readonly runs = new Map<string, number>();
  /**
   * The late statements of each held run: `written`, or the error's name
   * (and SQLSTATE, if it has one).
   */
  readonly late = new Map<string, string>();
  /** The query runner of the last held run's transaction. */
  queryRunner?: QueryRunner;

  /** Holds the next run of `reference` between its writes, at the barrier returned. */
  hold(reference: string): Barrier {
    const barrier = new Barrier();
    this.barriers.set(reference, barrier);
    return barrier;
  }

  /** Holds the next run of `reference` before its first statement. */
  holdBefore(reference: string): Barrier {
    const barrier = new Barrier();
    this.before.set(reference, barrier);
    return barrier;
  }

  /** The barrier of the next run of `reference` before its first statement (once). */
  takeBefore(reference: string): Barrier | undefined {
    const barrier = this.before.get(reference);
    this.before.delete(reference);
    return barrier;
  }

  /** Has the next run of `reference` wait for {@link lockOf} its reference. */
  block(reference: string): void {
    this.blocked.add(reference);
  }

  /** How the next run of `reference` is held, if it is (once). */
  take(reference: string): Barrier | 'lock' | undefined {
    const barrier = this.barriers.get(reference);
    this.barriers.delete(reference);
    if (barrier) {
      return barrier;
    }
    return this.blocked.delete(reference) ? 'lock' : undefined;
  }

  /** Counts a run of `reference`; returns its number. */
  run(reference: string): number {
    const run = (this.runs.get(reference) ?? 0) + 1;
    this.runs.set(reference, run);
    return run;
  }
}

/** The advisory lock a blocked run of `reference` waits for. */
export function lockOf(reference: string): number {
  let hash = 7;
  for (const char of reference) {
    hash = (hash * 31 + char.charCodeAt(0)) | 0;
  }
  return hash;
}

/**
 * One handler (writes, may wait idle in its transaction, writes again) on
 * routes that differ only in their deadline (`transactionTimeout`).
 */
@Controller('late')
export class LateController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly pause: Pause,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post()
  @Idempotent({ transactionTimeout: '30s' })
  create(@Body() body: { reference: string }) {
    return this.writeTwice(body.reference);
  }

  /** A request whose deadline passes while it waits for a transaction. */
  @Post('short')
  @Idempotent({ transactionTimeout: '500ms' })
  createShort(@Body() body: { reference: string }) {
    return this.writeTwice(body.reference);
  }

  /** A handler held past its deadline. */
  @Post('deadline')
  @Idempotent({ transactionTimeout: '1s' })
  createWithDeadline(@Body() body: { reference: string }) {
    return this.writeTwice(body.reference);
  }

  /**
   * A handler that writes once, may wait idle in its transaction (held),
   * and returns without another statement: only the completion is left to
   * find its transaction lost.
   */
  @Post('once')
  @Idempotent({ transactionTimeout: '30s' })
  createOnce(@Body() body: { reference: string }) {
    return this.writeOnce(body);
  }

  /** The same, on a route whose key is optional. */
  @Post('once-optional')
  @Idempotent({ transactionTimeout: '30s', required: false })
  createOnceOptional(@Body() body: { reference: string }) {
    return this.writeOnce(body);
  }

  private async writeOnce(body: { reference: string }) {
    const run = this.pause.run(body.reference);
    await this.orders.insert({
      reference: body.reference,
      source: `run-${run}-only`,
    });
    const held = this.pause.take(body.reference);
    if (held && held !== 'lock') {
      this.pause.queryRunner = this.idempotency.manager.queryRunner;
      await held.wait();
    }
    return { run };
  }

  private async writeTwice(reference: string) {
    const run = this.pause.run(reference);
    const before = this.pause.takeBefore(reference);
    if (before) {
      await before.wait();
      await this.record(reference, () =>
        this.orders.insert({ reference, source: `run-${run}-first` }),
      );
    } else {
      await this.orders.insert({ reference, source: `run-${run}-first` });
    }
    const held = this.pause.take(reference);
    if (!held) {
      await this.orders.insert({ reference, source: `run-${run}-second` });
      return { run };
    }
    this.pause.queryRunner = this.idempotency.manager.queryRunner;
    if (held !== 'lock') {
      await held.wait();
    }
    await this.record(reference, async () => {
      if (held === 'lock') {
        await this.orders.query('SELECT pg_advisory_xact_lock($1)', [
          lockOf(reference),
        ]);
      }
      await this.orders.insert({ reference, source: `run-${run}-second` });
    });
    return { run };
  }

  /** Runs the statements of a held run, and records what they did. */
  private async record(reference: string, statements: () => Promise<unknown>) {
    try {
      await statements();
      this.pause.late.set(reference, 'written');
    } catch (error) {
      const code =
        (error as { driverError?: { code?: string }; code?: unknown })
          .driverError?.code ?? (error as { code?: unknown }).code;
      this.pause.late.set(
        reference,
        `${(error as Error).name}${typeof code === 'string' ? ` ${code}` : ''}`,
      );
      throw error;
    }
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [LateController],
  providers: [Pause],
})
export class LostTransactionTestModule {}
