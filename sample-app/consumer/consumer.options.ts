import { Transport, type MicroserviceOptions } from '@nestjs/microservices';

/**
 * Where the payments consumer takes its messages from: `RABBITMQ_URL`
 * (default amqp://guest:guest@127.0.0.1:5672) and `PAYMENTS_QUEUE` (default
 * `payments`), `PREFETCH` messages at a time (default 8).
 */
export function paymentsConsumerOptions(): MicroserviceOptions & {
  options: { queue: string };
} {
  return {
    transport: Transport.RMQ,
    options: {
      urls: [process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672'],
      queue: process.env.PAYMENTS_QUEUE ?? 'payments',
      // Manual acknowledgement: the module acknowledges a message after its
      // transaction commits, and requeues it when the handler fails.
      noAck: false,
      prefetchCount: Number(process.env.PREFETCH ?? 8),
      queueOptions: { durable: true },
    },
  };
}
