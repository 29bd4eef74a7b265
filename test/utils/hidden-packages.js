/**
 * Entry of an application process whose imports go through module
 * resolution hooks (this very file, registered again in the loader's
 * thread): it then starts `HIDDEN_APP` (a path relative to the repository's
 * root).
 *
 * The hooks append every import of a package that `HIDDEN_PACKAGES` (a
 * regular expression over the specifier) matches to the file `PEER_LOG`
 * (synchronously: it is written before the import settles) and, unless
 * `HIDE=0`, refuse it the way Node.js refuses a package that is not
 * installed.
 */
import { appendFileSync } from 'node:fs';
import { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

const hidden = new RegExp(process.env.HIDDEN_PACKAGES ?? '^$');

export async function resolve(specifier, context, nextResolve) {
  if (hidden.test(specifier)) {
    appendFileSync(process.env.PEER_LOG, `${specifier}\n`);
    if (process.env.HIDE !== '0') {
      const error = new Error(
        `Cannot find package '${specifier}' imported from ${context.parentURL}`,
      );
      error.code = 'ERR_MODULE_NOT_FOUND';
      throw error;
    }
  }
  return nextResolve(specifier, context);
}

if (isMainThread) {
  register(import.meta.url);
  await import(
    new URL(`../../${process.env.HIDDEN_APP}`, import.meta.url).href
  );
}
