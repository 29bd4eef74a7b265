/**
 * Entry point of the benchmark's application (see bench.module.ts), started
 * by test/bench/bench.ts as a process of its own. Set up like the sample's
 * main.ts, with production log levels (no debug line per request).
 */
import { Logger, ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BenchAppModule } from './bench.module.js';

const app = await NestFactory.create(BenchAppModule, {
  abortOnError: false,
  logger: ['log', 'warn', 'error', 'fatal'],
});
app.useGlobalPipes(
  new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
);
app.enableShutdownHooks();
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
// bench.ts waits for this line.
new Logger('BenchApp').log(`Bench app listening on ${await app.getUrl()}`);
