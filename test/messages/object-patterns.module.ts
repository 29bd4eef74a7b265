import { Controller, Injectable, Module } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** An object pattern of this run only. */
const ENTITY = `order-${randomUUID().slice(0, 8)}`;

/**
 * The event both handlers below listen to, their pattern written with its
 * fields in two orders: Nest routes both as one pattern.
 */
export const OBJECT_PATTERN = { entity: ENTITY, action: 'paid' };

/** A request's object pattern, as its handler declares it. */
export const REFUND_PATTERN = { entity: ENTITY, action: 'refund' };

interface OrderMessage {
  reference: string;
}

@Injectable()
export class ObjectPatternRuns {
  runs = 0;
  refunds = 0;
}

@Controller()
export class PaidAudit {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly counted: ObjectPatternRuns,
  ) {}

  @EventPattern({ entity: ENTITY, action: 'paid' })
  @Idempotent({ concurrency: 'wait' })
  async audit(@Payload() message: OrderMessage) {
    this.counted.runs += 1;
    await this.orders.insert({ reference: message.reference, source: 'audit' });
  }
}

@Controller()
export class PaidLedger {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly counted: ObjectPatternRuns,
  ) {}

  @EventPattern({ action: 'paid', entity: ENTITY })
  @Idempotent({ concurrency: 'wait' })
  async ledger(@Payload() message: OrderMessage) {
    this.counted.runs += 1;
    await this.orders.insert({
      reference: message.reference,
      source: 'ledger',
    });
  }
}

@Controller()
export class Refunds {
  constructor(private readonly counted: ObjectPatternRuns) {}

  @MessagePattern(REFUND_PATTERN)
  @Idempotent()
  refund(@Payload() message: OrderMessage) {
    this.counted.refunds += 1;
    return { refunded: message.reference, run: this.counted.refunds };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [PaidAudit, PaidLedger, Refunds],
  providers: [ObjectPatternRuns],
})
export class ObjectPatternsModule {}
