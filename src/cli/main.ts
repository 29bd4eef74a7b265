#!/usr/bin/env node
/*
 * The package's command line, `npx nestjs-idempotency`: the operator's
 * service (`IdempotencyAdmin`), the collection and the schema as SQL, for
 * operators without a Nest shell. `--help` lists its commands.
 */
import { Logger, type LoggerService } from '@nestjs/common';
import { runCli } from './idempotency.cli.js';

/**
 * What the stores log (a server out of reach, a retry) goes to stderr, as
 * `nestjs-idempotency: <level>: <message>` lines: stdout is the command's
 * answer alone, which a script parses (`--json`).
 */
const toStderr =
  (level: string) =>
  (message: unknown): void => {
    process.stderr.write(`nestjs-idempotency: ${level}: ${String(message)}\n`);
  };
const stderrLogger: LoggerService = {
  log: toStderr('note'),
  warn: toStderr('warning'),
  error: toStderr('error'),
  fatal: toStderr('error'),
  debug: () => undefined,
  verbose: () => undefined,
};
Logger.overrideLogger(stderrLogger);

process.exitCode = await runCli(process.argv.slice(2), {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  env: process.env,
});
