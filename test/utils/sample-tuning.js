import { Logger, ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

/**
 * The module options a test chooses for a process of the sample's payments
 * API through the environment (test/utils/tuned-sample.js, and the soak's
 * instances on the other data libraries, test/soak/app/):
 *
 * - `SAMPLE_PRESENCE`: `off` for `presence: false` (no presence session: a
 *   dead instance's keys wait for their leases to run out, waiters poll), or
 *   a connection URL for `presence: { url }` (the session connects there,
 *   e.g. directly to PostgreSQL while the pool goes through PgBouncer).
 * - `SAMPLE_LEASE`: the `lease` option, e.g. `3s`.
 * - `SAMPLE_RETRY_AFTER`: the `retryAfter` option, in seconds.
 *
 * Plain JavaScript, so that tuned-sample.js runs without a build of its own.
 * {@link serveSample} serves them the sample's way.
 *
 * @param {Record<string, string | undefined>} env the process's environment.
 * @returns {{
 *   options: { ttl: string; lease?: string; retryAfter?: number };
 *   presence?: false | { url: string };
 * }} the module's options (the sample's `ttl`, and the lease and
 * `retryAfter` chosen) and, apart, the `presence` chosen (a module option
 * on TypeORM, an adapter's option on the other libraries).
 */
export function sampleTuning(env) {
  /** @type {{ ttl: string; lease?: string; retryAfter?: number }} */
  const options = { ttl: '24h' };
  if (env.SAMPLE_LEASE) {
    options.lease = env.SAMPLE_LEASE;
  }
  if (env.SAMPLE_RETRY_AFTER) {
    options.retryAfter = Number(env.SAMPLE_RETRY_AFTER);
  }
  const presence = env.SAMPLE_PRESENCE;
  if (presence === 'off') {
    return { options, presence: false };
  }
  return presence ? { options, presence: { url: presence } } : { options };
}

/**
 * Serves `module` as the sample's main.ts serves the sample: unknown body
 * fields refused (`ValidationPipe`), shutdown hooks on, on 127.0.0.1 and
 * `PORT` (0: any free port), then the sample's ready line.
 *
 * @param {import('@nestjs/common').Type} module the application's module.
 * @param {string} [label] said after the URL in the ready line.
 * @returns {Promise<void>} once it listens.
 */
export async function serveSample(module, label) {
  const app = await NestFactory.create(module, { abortOnError: false });
  app.useGlobalPipes(
    new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
  );
  app.enableShutdownHooks();
  await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
  const url = await app.getUrl();
  new Logger('PaymentsSample').log(
    `Payments sample listening on ${url}${label ? ` (${label})` : ''}`,
  );
}
