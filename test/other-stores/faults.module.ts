import { randomUUID } from 'node:crypto';
import { Body, Controller, Injectable, Post } from '@nestjs/common';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import type { Barrier } from '../utils/barrier.js';

/** What the handlers of one instance did, by idempotency key. */
@Injectable()
export class Runs {
  /** Executions of the handler. */
  readonly handler = new Map<string, number>();
  /** Executions of the `charge` step's function (not its stored result). */
  readonly charges = new Map<string, number>();
  /** Set by a test: the handler of that key waits at it. */
  readonly holds = new Map<string, Barrier>();

  /** Total of a map's counts. */
  static total(counts: ReadonlyMap<string, number>): number {
    return [...counts.values()].reduce((sum, n) => sum + n, 0);
  }

  count(counts: Map<string, number>, key: string): number {
    const n = (counts.get(key) ?? 0) + 1;
    counts.set(key, n);
    return n;
  }
}

/**
 * The payments route of test/other-stores/store-instance-app.js, in
 * process: the same method, route and body, so that either instance takes
 * the other's retries. Its `charge` step says which instance made it.
 */
@Controller()
export class PaymentsController {
  constructor(
    private readonly runs: Runs,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post('payments')
  @Idempotent()
  create(@Body() body: Record<string, unknown>) {
    return this.pay(body);
  }

  /** The same in wait mode, under `/waited`. */
  @Post('waited/payments')
  @Idempotent({ concurrency: 'wait', waitTimeout: '60s' })
  waited(@Body() body: Record<string, unknown>) {
    return this.pay(body);
  }

  private async pay(body: Record<string, unknown>) {
    const key = this.idempotency.key!;
    const execution = this.runs.count(this.runs.handler, key);
    const charge = await this.idempotency.step('charge', () => {
      this.runs.count(this.runs.charges, key);
      return { id: randomUUID(), by: 'in-process' };
    });
    await this.runs.holds.get(key)?.wait();
    // Another on every execution: a replay returns this very one.
    return { ...body, charge, execution, receipt: randomUUID() };
  }
}
