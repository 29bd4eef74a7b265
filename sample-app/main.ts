import { randomUUID } from 'node:crypto';
import { Logger, ValidationPipe, type LogLevel } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

// `SAMPLE_LOG_LEVELS=log,warn,error` leaves out the debug line the module
// logs for each request, as production logging would.
const levels = process.env.SAMPLE_LOG_LEVELS?.split(',') as
  LogLevel[] | undefined;
// A failed start throws here instead of aborting the process. The raw
// bodies are kept for the webhook receivers, which verify signatures over
// them.
const app = await NestFactory.create(AppModule, {
  abortOnError: false,
  rawBody: true,
  ...(levels && { logger: levels }),
});
// Unknown fields are rejected: they would still count in the request's
// fingerprint while the handler never sees them.
app.useGlobalPipes(
  new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
);
// SIGINT/SIGTERM close the HTTP server, then the database connections.
app.enableShutdownHooks();
await app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');

const url = await app.getUrl();
// A new key per start, so the suggested command creates a payment once and
// replays it on every repeat.
const example = `curl -i -X POST ${url}/payments -H 'Content-Type: application/json' -H 'Idempotency-Key: ${randomUUID()}' -d '{"amount":1250,"currency":"EUR","merchantId":"m_42"}'`;
new Logger('PaymentsSample').log(
  `Payments sample listening on ${url} — try: ${example}`,
);
