/**
 * The compiled sample app (dist-sample) under module options that a test
 * chooses through the environment, for a child process of a test (see
 * `TUNED_SAMPLE` in sample-process.ts). The sample itself reads none of these
 * variables: this entry builds its own application module around the
 * sample's database and payments modules.
 *
 * - `SAMPLE_PRESENCE`: `off` for `presence: false` (no presence session: a
 *   dead instance's keys wait for their leases to run out, waiters poll), or
 *   a connection URL for `presence: { url }` (the session connects there,
 *   e.g. directly to PostgreSQL while the pool goes through PgBouncer).
 * - `SAMPLE_LEASE`: the `lease` option, e.g. `3s`.
 * - `SAMPLE_RETRY_AFTER`: the `retryAfter` option, in seconds.
 *
 * Plain JavaScript, so that it runs without a build of its own: decorators
 * are applied by calling them. It prints the sample's ready line.
 */
import 'reflect-metadata';
import { Logger, Module, ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyModule } from 'nestjs-idempotency';
import { PaymentsModule } from '../../dist-sample/payments/payments.module.js';
import { PaymentsDatabase } from '../../dist-sample/typeorm.options.js';

const options = { ttl: '24h' };
const presence = process.env.SAMPLE_PRESENCE;
if (presence === 'off') {
  options.presence = false;
} else if (presence) {
  options.presence = { url: presence };
}
if (process.env.SAMPLE_LEASE) {
  options.lease = process.env.SAMPLE_LEASE;
}
if (process.env.SAMPLE_RETRY_AFTER) {
  options.retryAfter = Number(process.env.SAMPLE_RETRY_AFTER);
}

class TunedSampleModule {}
Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot(options),
    PaymentsModule,
  ],
})(TunedSampleModule);

const app = await NestFactory.create(TunedSampleModule, {
  abortOnError: false,
});
app.useGlobalPipes(
  new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
);
app.enableShutdownHooks();
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
new Logger('PaymentsSample').log(
  `Payments sample listening on ${await app.getUrl()}`,
);
