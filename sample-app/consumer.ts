import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Transport, type MicroserviceOptions } from '@nestjs/microservices';
import { ConsumerModule } from './consumer/consumer.module.js';

/**
 * The payments service as a RabbitMQ consumer: `npm run start:consumer`.
 * `RABBITMQ_URL` (default amqp://guest:guest@127.0.0.1:5672) and
 * `PAYMENTS_QUEUE` (default `payments`) say where messages come from; the
 * database is chosen as for the HTTP service.
 */
const queue = process.env.PAYMENTS_QUEUE ?? 'payments';
const app = await NestFactory.createMicroservice<MicroserviceOptions>(
  ConsumerModule,
  {
    transport: Transport.RMQ,
    options: {
      urls: [process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672'],
      queue,
      // Manual acknowledgement: the module acknowledges a message after its
      // transaction commits, and requeues it when the handler fails.
      noAck: false,
      prefetchCount: Number(process.env.PREFETCH ?? 8),
      queueOptions: { durable: true },
    },
    abortOnError: false,
  },
);
app.enableShutdownHooks();
await app.listen();
new Logger('PaymentsConsumer').log(
  `Payments consumer listening on queue ${queue}`,
);
