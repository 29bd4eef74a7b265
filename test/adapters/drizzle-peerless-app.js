/**
 * Imports the compiled `nestjs-idempotency/drizzle` entry, started by
 * test/utils/hidden-packages.js (which may make drizzle-orm unresolvable),
 * then makes its adapter. It prints, one line each: the drizzle-orm
 * modules asked for by the import alone (`imported: ...`), then what
 * making the adapter did (`created`, or `refused: <first line>`).
 */
import { readFileSync } from 'node:fs';
import { DrizzleIdempotencyAdapter } from 'nestjs-idempotency/drizzle';

const asked = () =>
  readFileSync(process.env.PEER_LOG, 'utf8').split('\n').filter(Boolean);

console.log(`imported: ${asked().join(' ')}`);
try {
  // The module's call; the database is looked up later, at onModuleInit.
  await new DrizzleIdempotencyAdapter({ drizzleInstanceToken: 'DB' }).create(
    {},
  );
  console.log('created');
} catch (error) {
  console.log(`refused: ${String(error.message).split('\n')[0]}`);
}
