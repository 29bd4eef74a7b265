/**
 * Jest for the tests of an application on NestJS 12, whose packages are ES
 * modules only: Jest loads ES modules in its native ESM mode alone, which
 * needs Node.js's `--experimental-vm-modules`
 * (`NODE_OPTIONS=--experimental-vm-modules jest`), and ts-jest must emit
 * ES modules for it.
 */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  // Sources import each other as Node.js's ES modules do, './app.module.js'.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true }] },
};
