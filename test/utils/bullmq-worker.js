/**
 * A BullMQ worker as a process of its own, on the compiled package (dist/):
 * a Nest application context with one `@Idempotent()` processor on queue
 * `BULLMQ_QUEUE` (under `BULLMQ_PREFIX`), writing an order per job through
 * the DataSource at `DATABASE_URL` (migrated by the test). With
 * `BULLMQ_KILL_AFTER_COMMIT` set to a key, it SIGKILLs itself right after
 * that job's record committed, before BullMQ hears that the job completed
 * (the module emits `executed` between the two). Its lock is short, so that
 * another worker finds the job stalled within about a second.
 *
 * Plain JavaScript, so that it runs without a build of its own: decorators
 * are applied by calling them. It prints a ready line once its worker runs.
 */
import 'reflect-metadata';
import { Inject, Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyModule } from 'nestjs-idempotency';

const queue = process.env.BULLMQ_QUEUE;
const killAfter = process.env.BULLMQ_KILL_AFTER_COMMIT;

class ChargesProcessor extends WorkerHost {
  constructor(dataSource) {
    super();
    this.dataSource = dataSource;
  }

  /** One order per job, in the job's transaction; the result names this process. */
  async process(job) {
    const [order] = await this.dataSource.query(
      'INSERT INTO orders (reference, source) VALUES ($1, $2) RETURNING id',
      [job.data.reference, queue],
    );
    return { id: order.id, reference: job.data.reference, pid: process.pid };
  }
}
Inject(DataSource)(ChargesProcessor, undefined, 0);
Idempotent()(
  ChargesProcessor.prototype,
  'process',
  Object.getOwnPropertyDescriptor(ChargesProcessor.prototype, 'process'),
);
Processor(queue, { lockDuration: 1_000, stalledInterval: 500 })(
  ChargesProcessor,
);

class WorkerModule {}
Module({
  imports: [
    TypeOrmModule.forRoot({ type: 'postgres', url: process.env.DATABASE_URL }),
    IdempotencyModule.forRoot({
      onEvent: (event) => {
        if (event.type === 'executed' && event.key === killAfter) {
          process.kill(process.pid, 'SIGKILL');
        }
      },
    }),
    BullModule.forRoot({
      connection: { host: '127.0.0.1', port: 6379 },
      prefix: process.env.BULLMQ_PREFIX,
    }),
    BullModule.registerQueue({ name: queue }),
  ],
  providers: [ChargesProcessor],
})(WorkerModule);

const app = await NestFactory.createApplicationContext(WorkerModule, {
  abortOnError: false,
});
app.enableShutdownHooks();
await app.get(ChargesProcessor).worker.waitUntilReady();
new Logger('BullMQWorker').log(`BullMQ worker ${process.pid} ready`);
