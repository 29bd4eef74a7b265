import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** What the hung run's statements did once it went on. */
export interface LateOutcome {
  /** Id of the order it inserted, when the insert went through. */
  readonly wrote?: number;
  /** What its statement threw. */
  readonly error?: unknown;
}

/** Holds the first run of each route past its deadline. */
@Injectable()
export class Hang {
  /** Replaced by each test. */
  barrier = new Barrier();
  runs = 0;
  private settle: (outcome: LateOutcome) => void = () => undefined;
  /** Settles when the hung run's statement after the barrier has ended. */
  late: Promise<LateOutcome> = this.reset();

  /** A new barrier and outcome, for the next test. */
  reset(): Promise<LateOutcome> {
    this.barrier = new Barrier();
    this.runs = 0;
    this.late = new Promise((resolve) => (this.settle = resolve));
    return this.late;
  }

  /** Records what the hung run's statement did. */
  settled(outcome: LateOutcome): void {
    this.settle(outcome);
  }
}

@Controller('hung')
export class HungController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly hang: Hang,
  ) {}

  /** The first run hangs before its first statement, then writes. */
  @Post('before-write')
  @Idempotent({ transactionTimeout: '1s' })
  async beforeWrite(@Body() body: { reference: string }) {
    const run = ++this.hang.runs;
    if (run === 1) {
      await this.hang.barrier.wait();
      return this.late(body.reference, run);
    }
    return { id: await this.insert(body.reference, run), run };
  }

  /** The first run writes, hangs inside its transaction, then writes again. */
  @Post('after-write')
  @Idempotent({ transactionTimeout: '1s' })
  async afterWrite(@Body() body: { reference: string }) {
    const run = ++this.hang.runs;
    const id = await this.insert(body.reference, run);
    if (run === 1) {
      await this.hang.barrier.wait();
      return this.late(body.reference, run);
    }
    return { id, run };
  }

  private async late(reference: string, run: number) {
    try {
      const id = await this.insert(reference, run);
      this.hang.settled({ wrote: id });
      return { id, run };
    } catch (error) {
      this.hang.settled({ error });
      throw error;
    }
  }

  private async insert(reference: string, run: number): Promise<number> {
    const order = await this.orders.save(
      this.orders.create({ reference, source: `run-${run}` }),
    );
    return order.id;
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [HungController],
  providers: [Hang],
})
export class HungHandlerTestModule {}
