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

/** Holds this instance's handlers after their claim, before their write. */
@Injectable()
export class Gate {
  hold = false;
  /** Replaced by each test that holds a handler. */
  barrier = new Barrier();
  /** Ids of the orders this instance's handlers inserted (committed or not). */
  readonly wrote: number[] = [];
}

@Controller('lost-lease')
export class LostLeaseController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly gate: Gate,
    @Inject(INSTANCE_NAME) private readonly instance: string,
  ) {}

  @Post()
  @Idempotent()
  async create(@Body() body: { reference: string }) {
    if (this.gate.hold) {
      await this.gate.barrier.wait();
    }
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: this.instance }),
    );
    this.gate.wrote.push(order.id);
    return {
      id: order.id,
      reference: order.reference,
      instance: this.instance,
    };
  }
}

/** The scenario's module for the instance named `instance`. */
export function lostLeaseModule(instance: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Order])],
    controllers: [LostLeaseController],
    providers: [Gate, { provide: INSTANCE_NAME, useValue: instance }],
  })
  class LostLeaseTestModule {}
  return LostLeaseTestModule;
}
