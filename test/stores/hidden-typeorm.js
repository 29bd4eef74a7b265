/**
 * Entry of the app of without-typeorm.e2e-spec.ts: registers module
 * resolution hooks (this very file, in the loader's thread), then starts
 * typeorm-free-app.js, whose imports all go through them.
 *
 * The hooks append every import of `typeorm`, `@nestjs/typeorm` or `pg`
 * (or of a file of theirs) to the file `PEER_LOG`, and refuse it the way
 * Node.js refuses a package that is not installed.
 */
import { appendFileSync } from 'node:fs';
import { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

const HIDDEN = /^(typeorm|@nestjs\/typeorm|pg)(\/|$)/;

export async function resolve(specifier, context, nextResolve) {
  if (HIDDEN.test(specifier)) {
    appendFileSync(process.env.PEER_LOG, `${specifier}\n`);
    const error = new Error(
      `Cannot find package '${specifier}' imported from ${context.parentURL}`,
    );
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return nextResolve(specifier, context);
}

if (isMainThread) {
  register(import.meta.url);
  await import('./typeorm-free-app.js');
}
