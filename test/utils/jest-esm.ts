/**
 * Whether Jest, on this Node.js, can `require()` an ES module (a CommonJS
 * package that requires an ESM-only one, such as @nestjs/common 12 or
 * content-disposition 3): its module loader does so from Node.js 24.9.
 * Applications are not concerned: Node.js itself loads such packages on
 * every version the package supports.
 */
export function jestRequiresEsm(): boolean {
  const [major, minor] = process.versions.node.split('.').map(Number);
  return major > 24 || (major === 24 && minor >= 9);
}

/**
 * `describe` where Jest can `require()` ES modules; otherwise the suite of
 * `what` is skipped, saying why.
 */
export function describeWithRequireEsm(what: string): typeof describe {
  if (jestRequiresEsm()) {
    return describe;
  }
  console.warn(
    `Skipping the ${what} tests: Jest on Node.js ${process.versions.node} cannot require() ES modules (it needs 24.9 or later)`,
  );
  return describe.skip;
}
