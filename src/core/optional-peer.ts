/**
 * @internal Whether `error`, thrown by `import(name)`, says that package
 * `name` is not installed: `ERR_MODULE_NOT_FOUND` under Node.js's ESM
 * loader, `MODULE_NOT_FOUND` under CommonJS and Jest's module registry. A
 * package that is installed but fails to load, or that misses a package
 * of its own, is not absent: its error is the user's to see.
 */
export function isAbsentPeer(error: unknown, name: string): boolean {
  const { code, message } = (error ?? {}) as {
    code?: unknown;
    message?: unknown;
  };
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    typeof message === 'string' &&
    (message.includes(`'${name}'`) ||
      message.includes(`"${name}"`) ||
      message.includes(`/${name}/`) ||
      message.includes(` ${name} `))
  );
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
