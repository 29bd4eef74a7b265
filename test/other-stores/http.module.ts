import {
  Body,
  Controller,
  Header,
  HttpCode,
  Injectable,
  Post,
} from '@nestjs/common';
import {
  IdempotencyConfigurationError,
  IdempotencyContext,
  Idempotent,
} from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';

/** What the handlers did, for the tests to assert. */
@Injectable()
export class Effects {
  orders = 0;
  charges = 0;
  failures = 0;
  /** Set by a test: the next order handler waits at it. */
  barrier: Barrier | undefined;
  /** The effects of the steps of `/hung-steps`, by step and run. */
  readonly stepEffects: string[] = [];
  /** Where the step of `/late-step` waits on its first run. */
  stepBarrier: Barrier | undefined;
  /** What the afterCommit() callbacks saw, in order. */
  readonly committed: string[] = [];
  /** Resolves when the next afterCommit() callback ran. */
  afterCommit: Promise<void> = Promise.resolve();
  onAfterCommit: () => void = () => undefined;
  /** What an afterCommit() callback reports of the store's record. */
  probe: (scope: string, key: string) => Promise<string> = () =>
    Promise.resolve('-');

  expectAfterCommit(): Promise<void> {
    this.afterCommit = new Promise((resolve) => {
      this.onAfterCommit = resolve;
    });
    return this.afterCommit;
  }
}

@Controller()
export class MemoryStoreController {
  constructor(
    private readonly effects: Effects,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post('orders')
  @Idempotent()
  @Header('X-Order-Source', 'memory')
  async create(@Body() body: { reference: string }) {
    this.effects.orders += 1;
    const order = this.effects.orders;
    await this.effects.barrier?.wait();
    const { scope, key } = this.idempotency;
    this.idempotency.afterCommit(async () => {
      const seen = await this.effects.probe(scope, key!);
      this.effects.committed.push(`${scope}:${body.reference}:${seen}`);
      this.effects.onAfterCommit();
    });
    // Bytes a re-serialisation would change: spacing, key order, escapes.
    return { order, reference: body.reference, note: 'é\u2028<>' };
  }

  @Post('waited')
  @Idempotent({ concurrency: 'wait', waitTimeout: '10s' })
  async waited(@Body() body: { reference: string }) {
    this.effects.orders += 1;
    await this.effects.barrier?.wait();
    return { reference: body.reference, order: this.effects.orders };
  }

  /** Held at `barrier` on its first run only; abandoned after 1 s. */
  @Post('hung')
  @Idempotent({ transactionTimeout: '1s' })
  async hung(@Body() body: { reference: string }) {
    this.effects.orders += 1;
    const run = this.effects.orders;
    if (run === 1) {
      await this.effects.barrier?.wait();
    }
    this.effects.committed.push(`hung:${run}:returned`);
    return { reference: body.reference, run };
  }

  /**
   * Two steps; held at `barrier` between them on its first run only,
   * abandoned after 1 s. Reports how its second step ended.
   */
  @Post('hung-steps')
  @Idempotent({ transactionTimeout: '1s' })
  async hungSteps() {
    this.effects.orders += 1;
    const run = this.effects.orders;
    const effect = (step: string) => () => {
      this.effects.stepEffects.push(`${step}:${run}`);
      return `${step}-${run}`;
    };
    const reserve = await this.idempotency.step('reserve', effect('reserve'));
    if (run === 1) {
      await this.effects.barrier?.wait();
    }
    let charge: string;
    try {
      charge = await this.idempotency.step('charge', effect('charge'));
    } catch (error) {
      this.effects.committed.push(
        `hung-steps:${run}:${(error as Error).constructor.name}`,
      );
      throw error;
    }
    this.effects.committed.push(`hung-steps:${run}:charged`);
    return { reserve, charge, run };
  }

  /**
   * One step, with a `ttl` shorter than the handler's time. Its first run
   * waits at `barrier` after its step, then fails (`hold: 'after'`), or in
   * it, before the step's result is saved (`hold: 'in'`, abandoned at 2 s).
   * Reports each run of the step's effect with the key it derived.
   */
  @Post('short-steps')
  @Idempotent({ ttl: '1s', transactionTimeout: '2s' })
  async shortSteps(@Body() body: { hold: 'after' | 'in' }) {
    this.effects.orders += 1;
    const run = this.effects.orders;
    const charge = await this.idempotency.step('charge', async () => {
      this.effects.stepEffects.push(
        `charge:${run}:${this.idempotency.deriveKey('charge')}`,
      );
      if (run === 1 && body.hold === 'in') {
        await this.effects.barrier?.wait();
      }
      return `charge-${run}`;
    });
    if (run === 1 && body.hold === 'after') {
      await this.effects.barrier?.wait();
      throw new Error('failed after its step');
    }
    return { charge, run };
  }

  /**
   * A `ttl` (500 ms) shorter than the lease: its first run waits at
   * `barrier`, then runs a step that records the key it derives and waits
   * at `stepBarrier` (abandoned at 3 s, before its result is saved).
   */
  @Post('late-step')
  @Idempotent({ ttl: '500ms', transactionTimeout: '3s' })
  async lateStep() {
    this.effects.orders += 1;
    const run = this.effects.orders;
    if (run === 1) {
      await this.effects.barrier?.wait();
    }
    return this.idempotency.step('charge', async () => {
      this.effects.stepEffects.push(this.idempotency.deriveKey('charge'));
      if (run === 1) {
        await this.effects.stepBarrier?.wait();
      }
      return { run };
    });
  }

  /** A body of `size` bytes. */
  @Post('report')
  @Idempotent()
  @HttpCode(200)
  @Header('Content-Type', 'text/plain')
  report(@Body() body: { size: number }) {
    this.effects.orders += 1;
    return 'r'.repeat(body.size);
  }

  @Post('flaky')
  @Idempotent()
  flaky(@Body() body: { reference: string }) {
    this.effects.failures += 1;
    this.idempotency.afterCommit(() => {
      this.effects.committed.push(`flaky:${body.reference}`);
    });
    if (this.effects.failures === 1) {
      throw new Error('the first attempt fails');
    }
    return { attempt: this.effects.failures };
  }

  /**
   * Charges in a step, with the key derived in it; answers the stored
   * charge and the key this attempt derives.
   */
  @Post('steps')
  @Idempotent()
  async steps(@Body() body: { fail: boolean }) {
    const charge = await this.idempotency.step('charge', () => {
      this.effects.charges += 1;
      return {
        id: `ch_${this.effects.charges}`,
        key: this.idempotency.deriveKey('charge'),
      };
    });
    if (body.fail && this.effects.failures++ === 0) {
      throw new Error('failed after the charge');
    }
    return { charge, key: this.idempotency.deriveKey('charge') };
  }

  @Post('transactions')
  @Idempotent()
  @HttpCode(200)
  async transactions() {
    const refusals: string[] = [];
    try {
      void this.idempotency.manager;
    } catch (error) {
      refusals.push(
        `manager: ${error instanceof IdempotencyConfigurationError} ${(error as Error).message.split('\n')[0]}`,
      );
    }
    try {
      await this.idempotency.newTransaction(() => Promise.resolve());
    } catch (error) {
      refusals.push(
        `newTransaction: ${error instanceof IdempotencyConfigurationError}`,
      );
    }
    return { refusals, active: this.idempotency.isActive };
  }
}
