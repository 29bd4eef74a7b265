import {
  Logger,
  ValidationPipe,
  type DynamicModule,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

/**
 * Starts a bench application set up like the sample's main.ts, with
 * production log levels (no debug line per request), on `PORT` (any free
 * port by default), and prints the line the benches wait for.
 */
export async function listenBenchApp(
  module: Type | DynamicModule,
): Promise<void> {
  const app = await NestFactory.create(module, {
    abortOnError: false,
    logger: ['log', 'warn', 'error', 'fatal'],
  });
  app.useGlobalPipes(
    new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
  );
  app.enableShutdownHooks();
  await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
  // The benches wait for this line.
  new Logger('BenchApp').log(`Bench app listening on ${await app.getUrl()}`);
}
