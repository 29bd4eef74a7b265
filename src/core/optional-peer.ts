import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';

/**
 * What a loader's "not found" error starts with, and the specifier it could
 * not find: Node.js's ESM loader names the package (`Cannot find package
 * 'x' imported from …`), CommonJS and Jest's module registries the
 * specifier (`Cannot find module 'x/sub'` followed by the require stack,
 * or by ` from '<file>'`).
 */
const NOT_FOUND = /^Cannot find (?:package|module) (['"])(.+?)\1/;

/** The package a bare specifier names: `@scope/name` or `name`. */
function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return parts.slice(0, specifier.startsWith('@') ? 2 : 1).join('/');
}

/**
 * @internal Whether `error`, thrown by `import(name)`, says that the package
 * of `name` (a package, or a file of one) is not installed:
 * `ERR_MODULE_NOT_FOUND` under Node.js's ESM loader, `MODULE_NOT_FOUND`
 * under CommonJS and Jest's module registries, about `name` itself. A
 * package that is installed but fails to load, or that misses a package
 * of its own (whose error names that other package), is not absent: its
 * error is the user's to see.
 */
export function isAbsentPeer(error: unknown, name: string): boolean {
  const { code, message } = (error ?? {}) as {
    code?: unknown;
    message?: unknown;
  };
  if (
    (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') ||
    typeof message !== 'string'
  ) {
    return false;
  }
  const missing = NOT_FOUND.exec(message)?.[2];
  return missing === name || missing === packageOf(name);
}

/**
 * @internal Loads the optional peer `name`: its module, or `undefined` when
 * it is not installed (see {@link isAbsentPeer}).
 * @throws what the import threw when the package is there but fails to load.
 */
export async function loadOptionalPeer<T>(
  name: string,
  load: () => Promise<T>,
): Promise<T | undefined> {
  try {
    return await load();
  } catch (error) {
    if (isAbsentPeer(error, name)) {
      return undefined;
    }
    throw error;
  }
}

/**
 * @internal Loads the peer `name` that a feature the application uses
 * needs.
 * @param problem what the application cannot do without it, a sentence:
 * "BullMQ processors need bullmq, which is not installed."
 * @throws IdempotencyConfigurationError when it is not installed, with
 * `problem` and what to install; what the import threw when the package is
 * there but fails to load.
 */
export async function loadRequiredPeer<T>(
  name: string,
  load: () => Promise<T>,
  problem: string,
): Promise<T> {
  const peer = await loadOptionalPeer(name, load);
  if (peer === undefined) {
    throw absentPeerError(problem, [packageOf(name)]);
  }
  return peer;
}

/**
 * @internal The configuration error of a feature the application uses
 * without the peers `names` it needs, which are not installed: `problem`
 * (a sentence), what to install, then the `alternatives`.
 */
export function absentPeerError(
  problem: string,
  names: readonly string[],
  ...alternatives: string[]
): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    problem,
    `Install ${names.length > 1 ? 'them' : 'it'} next to nestjs-idempotency: \`npm install ${names.join(' ')}\`.`,
    ...alternatives,
  );
}
