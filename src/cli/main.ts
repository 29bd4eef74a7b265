#!/usr/bin/env node
/*
 * The package's command line, `npx nestjs-idempotency`: the operator's
 * service (`IdempotencyAdmin`), the collection and the schema as SQL, for
 * operators without a Nest shell. `--help` lists its commands.
 */
import { runCli } from './idempotency.cli.js';

process.exitCode = await runCli(process.argv.slice(2), {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  env: process.env,
});
