import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { randomUUID } from 'node:crypto';
import { Idempotent } from '../../src/index.js';

/** Subjects of this run only: other runs on the same NATS server do not interfere. */
const RUN = randomUUID().slice(0, 8);
export const SUBJECTS = {
  wait: `idempotency.test.${RUN}.wait`,
  reject: `idempotency.test.${RUN}.reject`,
  event: `idempotency.test.${RUN}.event`,
  /** An event two handlers listen to. */
  shared: `idempotency.test.${RUN}.shared`,
  /** A wildcard pattern whose subject `overlap.A` another handler has too. */
  overlapAll: `idempotency.test.${RUN}.overlap.*`,
  overlapA: `idempotency.test.${RUN}.overlap.A`,
  /** A wildcard: `accounts.A`, `accounts.B`, ... reach one handler. */
  accounts: `idempotency.test.${RUN}.accounts.*`,
};

/** What the producers of the NATS suites send. */
export interface PaymentMessage {
  idempotencyKey?: string;
  reference: string;
}

/**
 * The NATS handlers of the suites, in both modes and for events, around a
 * `create` of each suite's own: rows in PostgreSQL, or effects counted on a
 * store without a database.
 */
export abstract class PaymentHandlers {
  protected abstract create(message: PaymentMessage): Promise<unknown>;

  @MessagePattern(SUBJECTS.wait)
  @Idempotent({ concurrency: 'wait' })
  waitMode(@Payload() message: PaymentMessage) {
    return this.create(message);
  }

  @MessagePattern(SUBJECTS.reject)
  @Idempotent()
  rejectMode(@Payload() message: PaymentMessage) {
    return this.create(message);
  }

  @EventPattern(SUBJECTS.event)
  @Idempotent()
  async paid(@Payload() message: unknown) {
    await this.create(message as PaymentMessage);
  }
}
