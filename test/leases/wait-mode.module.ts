import {
  Body,
  Controller,
  Inject,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Name of the application instance, written into its rows. */
export const INSTANCE_NAME = Symbol('INSTANCE_NAME');

/** Holds this instance's handlers of the references in `held`. */
@Injectable()
export class Gate {
  readonly held = new Set<string>();
  /** Replaced by each test that holds a handler. */
  barrier = new Barrier();
  /** References this instance's handlers ran for. */
  readonly ran: string[] = [];
}

@Controller('wait-mode')
export class WaitModeController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly gate: Gate,
    @Inject(INSTANCE_NAME) private readonly instance: string,
  ) {}

  @Post('wait')
  @Idempotent({ concurrency: 'wait', waitTimeout: '1m' })
  wait(@Body() body: { reference: string }) {
    return this.handle(body.reference);
  }

  @Post('reject')
  @Idempotent()
  reject(@Body() body: { reference: string }) {
    return this.handle(body.reference);
  }

  private async handle(reference: string) {
    this.gate.ran.push(reference);
    if (this.gate.held.has(reference)) {
      await this.gate.barrier.wait();
    }
    const order = await this.orders.save(
      this.orders.create({ reference, source: this.instance }),
    );
    return { id: order.id, reference, instance: this.instance };
  }
}

/** The scenario's module for the instance named `instance`. */
export function waitModeModule(instance: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Order])],
    controllers: [WaitModeController],
    providers: [Gate, { provide: INSTANCE_NAME, useValue: instance }],
  })
  class WaitModeTestModule {}
  return WaitModeTestModule;
}
