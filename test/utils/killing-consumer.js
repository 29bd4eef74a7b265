/**
 * The compiled sample consumer (dist-sample) with a fault for a test: it
 * SIGKILLs itself right after the message whose key is
 * `SAMPLE_KILL_AFTER_COMMIT` commits, before the broker hears its
 * acknowledgement (the module emits `executed` between the two). The sample
 * itself has no such hook: this entry builds its own application module
 * around the sample's database, payments module and consumer.
 *
 * Plain JavaScript, so that it runs without a build of its own: decorators
 * are applied by calling them. It prints the sample consumer's ready line.
 */
import 'reflect-metadata';
import { Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyModule } from 'nestjs-idempotency';
import { paymentsConsumerOptions } from '../../dist-sample/consumer/consumer.options.js';
import { PaymentsConsumer } from '../../dist-sample/consumer/payments.consumer.js';
import { PaymentsModule } from '../../dist-sample/payments/payments.module.js';
import { PaymentsDatabase } from '../../dist-sample/typeorm.options.js';

const killAfter = process.env.SAMPLE_KILL_AFTER_COMMIT;

class KillingConsumerModule {}
Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot({
      ttl: '24h',
      onEvent: (event) => {
        if (event.type === 'executed' && event.key === killAfter) {
          process.kill(process.pid, 'SIGKILL');
        }
      },
    }),
    PaymentsModule,
  ],
  controllers: [PaymentsConsumer],
})(KillingConsumerModule);

const options = paymentsConsumerOptions();
const app = await NestFactory.createMicroservice(KillingConsumerModule, {
  ...options,
  abortOnError: false,
});
app.enableShutdownHooks();
await app.listen();
new Logger('PaymentsConsumer').log(
  `Payments consumer listening on queue ${options.options.queue}`,
);
