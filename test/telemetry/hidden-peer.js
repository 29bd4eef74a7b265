/**
 * Entry of the app of without-peer.e2e-spec.ts: registers module resolution
 * hooks (this very file, in the loader's thread), then starts
 * peerless-app.js, whose imports all go through them.
 *
 * The hooks append every `@opentelemetry/*` package that is asked for to the
 * file `PEER_LOG` (synchronously: it is written before the import settles)
 * and, with `PEER_HIDDEN=1`, refuse it the way Node.js refuses a package
 * that is not installed.
 */
import { appendFileSync } from 'node:fs';
import { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

export async function resolve(specifier, context, nextResolve) {
  if (specifier.startsWith('@opentelemetry/')) {
    appendFileSync(process.env.PEER_LOG, `${specifier}\n`);
    if (process.env.PEER_HIDDEN === '1') {
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
  await import('./peerless-app.js');
}
