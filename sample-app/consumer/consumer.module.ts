import { Module } from '@nestjs/common';
import { IdempotencyModule, type IdempotencyEvent } from 'nestjs-idempotency';
import { PaymentsModule } from '../payments/payments.module.js';
import { PaymentsDatabase } from '../typeorm.options.js';
import { PaymentsConsumer } from './payments.consumer.js';

/**
 * Fault injection for the test suite: `SAMPLE_KILL_AFTER_COMMIT=<key>` makes
 * the process SIGKILL itself right after the message with that key commits,
 * before the broker hears its acknowledgement (the module emits `executed`
 * between the two). Unset in normal use.
 */
function killAfterCommit(event: IdempotencyEvent): void {
  if (
    event.type === 'executed' &&
    event.key === process.env.SAMPLE_KILL_AFTER_COMMIT
  ) {
    process.kill(process.pid, 'SIGKILL');
  }
}

@Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot({
      ttl: '24h',
      onEvent: process.env.SAMPLE_KILL_AFTER_COMMIT
        ? killAfterCommit
        : undefined,
    }),
    PaymentsModule,
  ],
  controllers: [PaymentsConsumer],
})
export class ConsumerModule {}
