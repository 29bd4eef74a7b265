import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { MicroserviceOptions } from '@nestjs/microservices';
import { ConsumerModule } from './consumer/consumer.module.js';
import { paymentsConsumerOptions } from './consumer/consumer.options.js';

/**
 * The payments service as a RabbitMQ consumer: `npm run start:consumer`.
 * The queue is chosen as `paymentsConsumerOptions()` says, the database as
 * for the HTTP service.
 */
const options = paymentsConsumerOptions();
const app = await NestFactory.createMicroservice<MicroserviceOptions>(
  ConsumerModule,
  { ...options, abortOnError: false },
);
app.enableShutdownHooks();
await app.listen();
new Logger('PaymentsConsumer').log(
  `Payments consumer listening on queue ${options.options.queue}`,
);
